//! The search index stays consistent with the spans: after flushes, after
//! compaction rewrote every file, after retention dropped files, and after a
//! restart with a sidecar lost; every live file has a sidecar and no sidecar
//! outlives its file.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    sync::Arc,
};

use bytes::Bytes;
use tracedb_lsm::{
    index::{
        read_sidecar, OpNeed, ResolvedNeed, SearchQuery, SummarySet, TagNeed, TagScope, ValueKind,
    },
    layout, Engine, ScopeGroup, Span, SpanId, SsTable, TimeRange, TraceId, ValuesLimit, WalkStats,
};
use tracedb_proto::wire::put_varint;

use crate::util::{files_on_disk, small_tree, TestClock, SEC, T0};

mod blocks;

use blocks::{blocks_of_16, client, failed, walk};

fn field(out: &mut Vec<u8>, n: u64, b: &[u8]) {
    put_varint(out, n << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// An encoded `KeyValue` with a string value.
fn kv(key: &str, value: &str) -> Vec<u8> {
    let mut any = Vec::new();
    field(&mut any, 1, value.as_bytes());
    let mut out = Vec::new();
    field(&mut out, 1, key.as_bytes());
    field(&mut out, 2, &any);
    out
}

fn service(name: &str) -> Arc<ScopeGroup> {
    let mut resource = Vec::new();
    field(&mut resource, 1, &kv("service.name", name));
    Arc::new(ScopeGroup {
        resource: Some(resource.into()),
        ..ScopeGroup::default()
    })
}

/// A span with an OTLP payload: name, kind 2 (server), parent, one attribute.
fn otlp_span(
    g: &Arc<ScopeGroup>,
    trace: u128,
    id: u64,
    parent: Option<u64>,
    name: &str,
    start: u64,
    len: u64,
) -> Span {
    let mut p = Vec::new();
    field(&mut p, 1, &trace.to_be_bytes());
    field(&mut p, 2, &id.to_be_bytes());
    if let Some(parent) = parent {
        field(&mut p, 4, &parent.to_be_bytes());
    }
    field(&mut p, 5, name.as_bytes());
    put_varint(&mut p, 6 << 3);
    put_varint(&mut p, 2);
    put_varint(&mut p, 7 << 3 | 1);
    p.extend_from_slice(&start.to_le_bytes());
    put_varint(&mut p, 8 << 3 | 1);
    p.extend_from_slice(&(start + len).to_le_bytes());
    field(&mut p, 9, &kv("tenant", &format!("t{}", trace % 2)));
    if id == 9 {
        // A key with a value per trace: more than a digest lists per block.
        field(&mut p, 9, &kv("user", &format!("u{trace}")));
    } else if id >= 11 {
        // More of it: a value per span.
        field(&mut p, 9, &kv("user", &format!("u{trace}-{id}")));
    }
    Span {
        trace_id: TraceId(trace.to_be_bytes()),
        span_id: SpanId(id.to_be_bytes()),
        start_unix_nano: start,
        end_unix_nano: start + len,
        group: g.clone(),
        payload: Bytes::from(p),
    }
}

/// Trace `t`: a "front" root calling "back" twice; `t` ms long, at `start`.
fn trace(t: u128, start: u64) -> Vec<Span> {
    let (front, back) = (service("front"), service("back"));
    let ms = 1_000_000;
    vec![
        otlp_span(&front, t, 1, None, "GET /", start, t as u64 * ms),
        otlp_span(&back, t, 2, Some(1), "query", start + ms, ms / 2),
        otlp_span(&back, t, 3, Some(1), "query", start + 2 * ms, ms / 2),
    ]
}

/// The traces a search finds: the walk's candidates (as production runs
/// it), with what the walk leaves to its caller (the trace's start and
/// duration) checked on the spans read back.
fn found(engine: &Engine, q: &SearchQuery, duration_min: u64) -> BTreeSet<u128> {
    let mut walk = engine.candidates(q).expect("walk");
    let mut out = BTreeSet::new();
    while let Some(c) = walk.next_candidate().expect("step") {
        let spans = engine.get_trace(&c.trace_id).expect("get");
        let start = spans.iter().map(|s| s.start_unix_nano).min();
        let end = spans.iter().map(|s| s.end_unix_nano).max();
        let (Some(start), Some(end)) = (start, end) else {
            panic!("a candidate without spans: {:?}", c.trace_id);
        };
        if start >= q.start_min && end - start >= duration_min {
            out.insert(u128::from_be_bytes(c.trace_id.0));
        }
    }
    out
}

/// A query needing some span of `service` (and of `name`, if given).
fn op(service: &str, name: Option<&str>) -> SearchQuery {
    SearchQuery {
        needs: vec![OpNeed {
            service: Some(service.into()),
            name: name.map(Into::into),
            ..OpNeed::default()
        }],
        ..SearchQuery::default()
    }
}

/// A query needing the string attribute `key` = `value` on the trace.
fn tag(key: &str, value: &str) -> SearchQuery {
    SearchQuery {
        needs: vec![OpNeed {
            tags: vec![TagNeed {
                scope: None,
                key: key.into(),
                value: value.into(),
                kind: ValueKind::Str,
            }],
            ..OpNeed::default()
        }],
        ..SearchQuery::default()
    }
}

fn sidecars_on_disk(dir: &Path) -> BTreeSet<u64> {
    std::fs::read_dir(layout::tables_dir(dir))
        .expect("tables dir")
        .filter_map(|e| layout::sidecar_id(&e.expect("entry").file_name().to_string_lossy()))
        .collect()
}

#[test]
fn index_follows_flush_compaction_retention_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    // 40 traces over 40 seconds (several partitions), written in 4 batches,
    // the last one still in memory when first searched.
    for batch in 0..4u128 {
        let spans: Vec<Span> = (batch * 10 + 1..=batch * 10 + 10)
            .flat_map(|t| trace(t, T0 - 50 * SEC + t as u64 * SEC))
            .collect();
        engine.write_blocking(spans).expect("write");
        if batch < 3 {
            engine.flush().expect("flush");
        }
    }
    let by_service = op("back", None);
    // With a duration of 30 ms or more.
    let slow = op("front", Some("GET /"));
    let slow_min = 30_000_000;
    let tagged = SearchQuery {
        start_min: T0 - 30 * SEC,
        ..tag("tenant", "t1")
    };
    let expect_all: BTreeSet<u128> = (1..=40).collect();
    let expect_slow: BTreeSet<u128> = (30..=40).collect();
    let expect_tagged: BTreeSet<u128> = (20..=40).filter(|t| t % 2 == 1).collect();
    let check = |engine: &Engine,
                 want_all: &BTreeSet<u128>,
                 want_slow: &BTreeSet<u128>,
                 want_tagged: &BTreeSet<u128>| {
        assert_eq!(&found(engine, &by_service, 0), want_all);
        assert_eq!(&found(engine, &slow, slow_min), want_slow);
        assert_eq!(&found(engine, &tagged, 0), want_tagged);
        let deps = engine
            .index(Default::default())
            .expect("index")
            .dependencies(engine, 0, 0)
            .expect("dependencies");
        let calls = deps
            .get(&("front".to_string(), "back".to_string()))
            .copied();
        assert_eq!(calls, Some(2 * want_all.len() as u64));
    };
    check(&engine, &expect_all, &expect_slow, &expect_tagged);
    let index = engine.index(Default::default()).expect("index");
    assert_eq!(index.services(), ["back", "front"]);
    assert_eq!(index.operations("back", None), [("query".to_string(), 2)]);
    assert!(index.operations("back", Some(3)).is_empty());
    let (newest, _) = walk(&engine, &slow, 1);
    assert_eq!(newest[0].0, 40, "newest first");
    let spans = engine
        .get_trace(&TraceId(newest[0].0.to_be_bytes()))
        .expect("get");
    assert_eq!(spans.len(), 3);

    engine.flush().expect("flush");
    assert_eq!(sidecars_on_disk(dir.path()), files_on_disk(dir.path()));
    engine.compact().expect("compact");
    assert!(engine.stats().compactions > 0);
    assert_eq!(sidecars_on_disk(dir.path()), files_on_disk(dir.path()));
    check(&engine, &expect_all, &expect_slow, &expect_tagged);

    // Retention (60 s): traces starting before T0 + 25 s - 60 s expire.
    clock.advance(25 * SEC);
    engine.apply_retention().expect("retention");
    engine.compact().expect("compact");
    let left: BTreeSet<u128> = found(&engine, &by_service, 0);
    assert!(!left.is_empty() && left.len() < 40, "{left:?}");
    assert!(
        left.iter().all(|&t| t >= 15),
        "expired traces found: {left:?}"
    );
    assert_eq!(sidecars_on_disk(dir.path()), files_on_disk(dir.path()));

    // A lost sidecar is rebuilt from its file after a restart.
    engine.close().expect("close");
    drop(engine);
    let lost = *sidecars_on_disk(dir.path())
        .iter()
        .next()
        .expect("a sidecar");
    std::fs::remove_file(dir.path().join(format!("tables/{lost:020}.idx"))).expect("remove");
    std::fs::write(
        dir.path().join("tables/99999999999999999999.idx"),
        b"orphan",
    )
    .expect("write");
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("reopen");
    assert_eq!(found(&engine, &by_service, 0), left);
    assert_eq!(sidecars_on_disk(dir.path()), files_on_disk(dir.path()));
}

#[test]
fn calls_whose_parent_is_in_another_part_are_counted_from_the_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let (front, back) = (service("front"), service("back"));
    let ms = 1_000_000;
    let start = T0 - 30 * SEC;
    let deps = |engine: &Engine| {
        let calls = engine
            .dependencies(Default::default())
            .expect("dependencies");
        let whole = engine
            .index(Default::default())
            .expect("index")
            .dependencies(engine, 0, 0)
            .expect("dependencies");
        assert_eq!(calls, whole, "one set at a time, as over all at once");
        calls
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    {
        let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
        // The roots go to a file; their children, of another service, come
        // later and stay in memory: every call crosses parts.
        let roots: Vec<Span> = (1..=5u128)
            .map(|t| otlp_span(&front, t, 1, None, "GET /", start, 10 * ms))
            .collect();
        engine.write_blocking(roots).expect("write");
        engine.flush().expect("flush");
        let mut children: Vec<Span> = (1..=5u128)
            .map(|t| otlp_span(&back, t, 2, Some(1), "query", start + ms, ms))
            .collect();
        // Same service as its parent: not a call between services.
        children.push(otlp_span(&front, 1, 3, Some(1), "render", start + ms, ms));
        // A parent that never arrived: no call can be named.
        children.push(otlp_span(&back, 2, 4, Some(99), "query", start + ms, ms));
        engine.write_blocking(children).expect("write");
        let calls = deps(&engine);
        assert_eq!(calls.get(&pair("front", "back")), Some(&5), "{calls:?}");
        assert_eq!(calls.len(), 1, "{calls:?}");

        // The children in a second file: both parts are sidecars now.
        engine.flush().expect("flush");
        assert_eq!(deps(&engine).get(&pair("front", "back")), Some(&5));
        engine.close().expect("close");
    }
    // Read back from the sidecars on disk, then with every trace merged
    // into one part by compaction.
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("reopen");
    assert_eq!(deps(&engine).get(&pair("front", "back")), Some(&5));
    engine.compact().expect("compact");
    let calls = deps(&engine);
    assert_eq!(calls.get(&pair("front", "back")), Some(&5), "{calls:?}");
    assert_eq!(calls.len(), 1);
}

/// What the walk proposes for `q` (of one need at most), worked out from
/// every summary set of the snapshot at once: each trace with a part in the
/// window that passes the need, at the start of its newest such part, newest
/// first (then by trace ID). The walk's definition without what the walk is
/// for (the heap over the sources, skipping blocks by their digests,
/// decoding parts as it reaches them), so it is kept as an oracle: a bug in
/// those shows as a difference.
fn proposed(engine: &Engine, q: &SearchQuery) -> Vec<(u128, u64)> {
    assert!(
        q.needs.len() <= 1,
        "the walk checks the need with most conditions"
    );
    let whole = engine
        .index(TimeRange::new(q.start_min.max(q.end_min), q.start_max))
        .expect("index");
    let end_min = q.end_min.max(whole.expire_before);
    let mut newest: BTreeMap<u128, u64> = BTreeMap::new();
    for set in &whole.sets {
        let filter = q.needs.first().map(|n| ResolvedNeed::in_set(set, n));
        for part in &set.traces {
            let start = part.start_unix_nano;
            if start >= q.start_min
                && (q.start_max == 0 || start <= q.start_max)
                && part.end_unix_nano >= end_min
                && filter.as_ref().is_none_or(|f| f.passes(part))
            {
                let at = newest
                    .entry(u128::from_be_bytes(part.trace_id.0))
                    .or_default();
                *at = (*at).max(start);
            }
        }
    }
    let mut out: Vec<(u128, u64)> = newest.into_iter().collect();
    out.sort_by_key(|&(id, start)| (std::cmp::Reverse(start), id));
    out
}

#[test]
fn the_walk_over_the_files_proposes_what_the_whole_snapshot_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    let (front, back) = (service("front"), service("back"));
    let ms = 1_000_000;
    let start = T0 - 20 * SEC;
    // Trace IDs spread over the whole ID space; starts within one partition
    // (10 s), so a merge cuts its output into files of disjoint IDs.
    let trace = |t: u64| -> Vec<Span> {
        let id = u128::from(t).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        let at = start + (t * 7 % 5_000) * ms;
        let back_span = if t.is_multiple_of(3) { &front } else { &back };
        vec![
            otlp_span(&front, id, 1, None, "GET /", at, (t % 50 + 1) * ms),
            otlp_span(back_span, id, 2, Some(1), "query", at + ms, ms / 2),
        ]
    };
    // 600 traces merged into files, 200 in level-0 files, 50 in memory.
    for batch in 0..6 {
        engine
            .write_blocking((batch * 100..batch * 100 + 100).flat_map(trace).collect())
            .expect("write");
        engine.flush().expect("flush");
    }
    engine.compact().expect("compact");
    for first in [600, 650, 700, 750] {
        engine
            .write_blocking((first..first + 50).flat_map(trace).collect())
            .expect("write");
        engine.flush().expect("flush");
    }
    engine
        .write_blocking((800..850).flat_map(trace).collect())
        .expect("write");

    let queries = [
        SearchQuery::default(),
        op("back", None),
        op("front", Some("GET /")),
        SearchQuery {
            start_min: start + 2 * SEC,
            ..tag("tenant", "t1")
        },
    ];
    for q in &queries {
        let (walked, _) = walk(&engine, q, usize::MAX);
        assert!(!walked.is_empty(), "{q:?}");
        assert_eq!(walked, proposed(&engine, q), "{q:?}");
    }
    let (all, all_stats) = walk(&engine, &queries[0], usize::MAX);
    assert_eq!(all.len(), 850);
    // A slice of the trace IDs: its traces, from the merged files holding it.
    let (lo, hi) = (u128::MAX / 4, u128::MAX / 2);
    let ids = Some((TraceId(lo.to_be_bytes()), TraceId(hi.to_be_bytes())));
    let sliced = SearchQuery {
        trace_ids: ids,
        ..SearchQuery::default()
    };
    let (walked, stats) = walk(&engine, &sliced, usize::MAX);
    let expected: Vec<_> = all
        .into_iter()
        .filter(|(id, _)| (lo..=hi).contains(id))
        .collect();
    assert!(expected.len() > 100 && walked == expected, "{walked:?}");
    assert!(
        stats.blocks_read < all_stats.blocks_read,
        "{stats:?} {all_stats:?}"
    );

    // The union queries, one set at a time, answer as over the whole snapshot.
    let whole = engine.index(TimeRange::default()).expect("index");
    let (mut services, mut values, mut sets) = (BTreeSet::new(), BTreeSet::new(), 0);
    engine
        .each_index(TimeRange::default(), |one| {
            sets += 1;
            services.extend(one.services());
            values.extend(one.tag_values(None, "tenant", 0, 0, &[]));
        })
        .expect("each index");
    assert_eq!(sets, whole.sets.len());
    assert_eq!(services.into_iter().collect::<Vec<_>>(), whole.services());
    assert_eq!(values, whole.tag_values(None, "tenant", 0, 0, &[]));
    assert_eq!(values.len(), 2);
    let calls = engine
        .dependencies(TimeRange::default())
        .expect("dependencies");
    assert_eq!(calls, whole.dependencies(&engine, 0, 0).expect("whole"));
    let front_back = (0..850).filter(|t| t % 3 != 0).count() as u64;
    assert_eq!(
        calls.get(&("front".to_string(), "back".to_string())),
        Some(&front_back)
    );
}

/// A trace part with its strings resolved: two sets agree on a trace when
/// their parts are equal, however each numbered its strings.
#[derive(Debug, PartialEq)]
struct Resolved {
    trace_id: TraceId,
    start_end: (u64, u64),
    spans_errors: (u32, u32),
    root: Option<(String, String)>,
    ops: BTreeSet<(String, String, u8)>,
    tags: BTreeSet<(u8, String, String)>,
    edges: BTreeSet<(String, String, u32)>,
    orphans: BTreeSet<([u8; 8], String)>,
}

fn resolve(set: &SummarySet) -> Vec<Resolved> {
    let s = |id: u32| set.str(id).to_owned();
    set.traces
        .iter()
        .map(|t| Resolved {
            trace_id: t.trace_id,
            start_end: (t.start_unix_nano, t.end_unix_nano),
            spans_errors: (t.span_count, t.error_count),
            root: t.root.map(|(a, b)| (s(a), s(b))),
            ops: t
                .ops
                .iter()
                .map(|o| (s(o.service), s(o.name), o.kind))
                .collect(),
            tags: t
                .tags
                .iter()
                .map(|g| (g.scope as u8, s(g.key), s(g.value)))
                .collect(),
            edges: t
                .edges
                .iter()
                .map(|e| (s(e.parent), s(e.child), e.calls))
                .collect(),
            orphans: t.orphans.iter().map(|(id, c)| (*id, s(*c))).collect(),
        })
        .collect()
}

/// Compaction copies the index part of a trace that comes whole from one
/// input file, and summarizes from the spans a trace merged from several
/// files, one that lost duplicates, or one split across partitions; either
/// way every sidecar it writes says what a rebuild from the file would.
#[test]
fn compaction_sidecars_carry_parts_over_as_a_rebuild_would_make_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let engine = Engine::open(small_tree(dir.path(), &clock)).expect("open");
    let db = service("db");
    for batch in 0..4u128 {
        let mut spans: Vec<Span> = (batch * 10 + 1..=batch * 10 + 10)
            .flat_map(|t| trace(t, T0 - 50 * SEC + t as u64 * SEC))
            .collect();
        match batch {
            // Late spans of traces 1 and 5, in other files than the rest.
            2 => {
                for t in [1, 5] {
                    let start = T0 - 50 * SEC + t as u64 * SEC;
                    spans.push(otlp_span(&db, t, 4, Some(2), "select", start + 3, 7));
                }
            }
            // A retried export: trace 12's spans again.
            3 => spans.extend(trace(12, T0 - 50 * SEC + 12 * SEC)),
            _ => {}
        }
        // A child whose parent never arrives: an orphan in a part of its own.
        spans.push(otlp_span(
            &db,
            100 + batch,
            9,
            Some(8),
            "fetch",
            T0 - 40 * SEC,
            5,
        ));
        engine.write_blocking(spans).expect("write");
        engine.flush().expect("flush");
    }
    // One input's sidecar lost and one damaged: their traces are summarized
    // from their spans.
    let inputs: Vec<u64> = files_on_disk(dir.path()).into_iter().collect();
    assert!(inputs.len() >= 4, "{inputs:?}");
    let sidecar = |id: u64| dir.path().join("tables").join(format!("{id:020}.idx"));
    std::fs::remove_file(sidecar(inputs[0])).expect("remove a sidecar");
    let mut damaged = std::fs::read(sidecar(inputs[1])).expect("read a sidecar");
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0xff;
    std::fs::write(sidecar(inputs[1]), damaged).expect("damage a sidecar");
    engine.compact().expect("compact");
    let stats = engine.stats();
    assert!(stats.compactions > 0);
    assert!(stats.compaction_duplicates > 0, "trace 12 was merged");
    assert!(stats.compaction_index_parts_reused > 0, "{stats:?}");

    let files = files_on_disk(dir.path());
    assert!(!files.is_empty());
    let mut traces = 0;
    for id in files {
        let path = dir.path().join("tables").join(format!("{id:020}.sst"));
        let spans: Vec<Span> = SsTable::open(&path)
            .expect("open table")
            .iter()
            .collect::<Result<_, _>>()
            .expect("read spans");
        let stored = resolve(&read_sidecar(&path).expect("sidecar"));
        assert_eq!(
            stored,
            resolve(&SummarySet::from_sorted_spans(&spans)),
            "file {id}"
        );
        traces += stored.len();
    }
    assert!(traces >= 44, "{traces} trace parts");
    engine.close().expect("close");
}

#[test]
fn tag_keys_and_values_from_the_digests_are_those_of_the_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    let rare = service("rare");
    let at = |t: u128| T0 - 50 * SEC + t as u64 * 10_000_000;
    let batch = |from: u128, to: u128| -> Vec<Span> {
        (from..=to)
            .flat_map(|t| {
                let mut spans = trace(t, at(t));
                if t % 8 == 0 {
                    let lookup = otlp_span(&rare, t, 9, Some(1), "lookup", at(t) + 1, 10);
                    // Every other one a client span: blocks with both kinds.
                    spans.push(if t % 16 == 0 { client(lookup) } else { lookup });
                }
                if t % 5 == 0 {
                    spans[0] = failed(spans[0].clone());
                }
                // Five values of "user" a trace in the first file: 80 a
                // block, more than its digest lists.
                if t <= 300 {
                    let back = service("back");
                    spans.extend(
                        (11..=15).map(|id| otlp_span(&back, t, id, Some(1), "q", at(t), 1)),
                    );
                }
                spans
            })
            .collect()
    };
    // Two files and a buffer.
    engine.write_blocking(batch(1, 300)).expect("write");
    engine.flush().expect("flush");
    engine.write_blocking(batch(301, 600)).expect("write");
    engine.flush().expect("flush");
    engine.write_blocking(batch(601, 640)).expect("write");

    let tenant = |value: &str| TagNeed {
        scope: Some(TagScope::Span),
        key: "tenant".into(),
        value: value.into(),
        kind: ValueKind::Str,
    };
    let rare = OpNeed {
        service: Some("rare".into()),
        ..OpNeed::default()
    };
    // What a query being typed may already say, each read from the
    // blocks where they lie and checked against the parts as a whole.
    let narrowings: Vec<Vec<OpNeed>> = vec![
        vec![],
        vec![rare.clone()],
        vec![OpNeed {
            service: Some("back".into()),
            name: Some("q".into()),
            ..OpNeed::default()
        }],
        vec![OpNeed {
            name: Some("lookup".into()),
            kind: Some(3),
            ..OpNeed::default()
        }],
        vec![OpNeed {
            kind: Some(3),
            ..OpNeed::default()
        }],
        vec![OpNeed {
            tags: vec![tenant("t0")],
            ..OpNeed::default()
        }],
        vec![OpNeed {
            tags: vec![tenant("t9")],
            ..OpNeed::default()
        }],
        vec![OpNeed {
            service: Some("nowhere".into()),
            ..OpNeed::default()
        }],
        vec![OpNeed {
            service: Some("front".into()),
            error: true,
            ..OpNeed::default()
        }],
        vec![
            rare.clone(),
            OpNeed {
                tags: vec![tenant("t1")],
                ..OpNeed::default()
            },
        ],
    ];
    let windows = [
        TimeRange::ALL,
        // Cuts blocks in the middle.
        TimeRange::new(at(77) + 5, at(505) + 5),
        TimeRange::new(at(630), 0),
    ];
    let mut users_seen = 0;
    for range in windows {
        let whole = engine.index(range).expect("index");
        let (start, end) = (range.start_unix_nano, range.end_unix_nano);
        assert_eq!(
            engine.tag_keys(range).expect("keys"),
            whole.tag_keys(start, end),
            "{range:?}"
        );
        for key in ["tenant", "user", "nothing"] {
            for needs in &narrowings {
                for scope in [None, Some(TagScope::Span), Some(TagScope::Resource)] {
                    let got = engine
                        .tag_values(scope, key, range, needs, ValuesLimit::NONE)
                        .expect("values");
                    let want = whole.tag_values(scope, key, start, end, needs);
                    assert_eq!(got.values, want, "{key} {scope:?} {needs:?} {range:?}");
                    assert!(!got.stopped);
                    if key == "user" && scope != Some(TagScope::Resource) {
                        users_seen += got.values.len();
                    }
                    // Limited: some of the same values, and a mark when more
                    // may exist.
                    let five = ValuesLimit {
                        values: 5,
                        bytes: 0,
                    };
                    let some = engine
                        .tag_values(scope, key, range, needs, five)
                        .expect("values");
                    assert!(some.values.is_subset(&want), "{key} {range:?}");
                    assert_eq!(some.values.len(), want.len().min(5), "{key} {range:?}");
                    assert_eq!(some.stopped, want.len() >= 5, "{key} {range:?}");
                    let text: usize = want.iter().map(|(v, _)| v.len()).sum();
                    let bytes = ValuesLimit {
                        values: 0,
                        bytes: 40,
                    };
                    let some = engine
                        .tag_values(scope, key, range, needs, bytes)
                        .expect("values");
                    assert!(some.values.is_subset(&want), "{key} {range:?}");
                    assert_eq!(some.stopped, text >= 40, "{key} {range:?}");
                    let kept: usize = some.values.iter().map(|(v, _)| v.len()).sum();
                    assert!(kept <= 40 && kept == some.bytes, "{key} {range:?}: {kept}");
                    if text > 200 {
                        assert!(
                            some.values.len() < want.len(),
                            "{key} {range:?}: stopped early"
                        );
                    }
                }
            }
        }
    }
    // Over the three windows: the 1,500 values of the first file's blocks
    // and the rare traces' are read.
    assert!(users_seen > 2000, "{users_seen}");

    // Blocks read by several threads give the answers of one reading a
    // block at a time, stopping where it stops.
    let limited = |engine: &Engine| -> Vec<(BTreeSet<(String, ValueKind)>, bool)> {
        let mut out = Vec::new();
        for range in windows {
            for needs in &narrowings {
                for values in [1, 5, 100] {
                    let limit = ValuesLimit { values, bytes: 0 };
                    let got = engine
                        .tag_values(None, "user", range, needs, limit)
                        .expect("values");
                    out.push((got.values, got.stopped));
                }
            }
        }
        out
    };
    engine.flush().expect("flush");
    let (dir, several) = (dir.path(), limited(&engine));
    drop(engine);
    let mut opts = small_tree(dir, &TestClock::new());
    (opts.index_block_parts, opts.search_threads) = (16, 1);
    opts.memtable.flush_bytes = 64 << 20;
    let engine = Engine::open(opts).expect("open");
    assert_eq!(limited(&engine), several);
    assert!(several
        .iter()
        .any(|(values, stopped)| *stopped && values.len() == 100));
}
