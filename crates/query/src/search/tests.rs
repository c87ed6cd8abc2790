use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use tracedb_lsm::{Engine, EngineOptions, MemTableOptions, ScopeGroup, Span, SpanId, TraceId};
use tracedb_traceql::{
    arbitrary::{self, Rng},
    Compiled,
};

use super::{answer_order, run, Search};
use crate::cancel::Cancel;

const SEC: u64 = 1_000_000_000;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// Spans as the engine stores them, from the generator's encoded parts.
pub(crate) fn spans(id: TraceId, parts: Vec<arbitrary::EncodedParts>) -> Vec<Span> {
    parts
        .into_iter()
        .map(|(resource, scope, payload)| {
            let decoded =
                <tracedb_proto::trace::v1::Span as prost::Message>::decode(payload.as_slice())
                    .expect("generated span");
            Span {
                trace_id: id,
                span_id: SpanId::from_slice(&decoded.span_id).expect("8 bytes"),
                start_unix_nano: decoded.start_time_unix_nano,
                end_unix_nano: decoded.end_time_unix_nano,
                group: Arc::new(ScopeGroup {
                    resource: Some(Bytes::from(resource)),
                    scope: Some(Bytes::from(scope)),
                    ..ScopeGroup::default()
                }),
                payload: Bytes::from(payload),
            }
        })
        .collect()
}

/// The search against every trace evaluated, newest first: whatever the
/// index prunes and however the candidates are paged, the answer is the
/// newest `limit` traces the query matches, with the same spansets. The
/// store has traces in files, split across files, and in memory.
#[test]
fn the_search_answers_as_evaluating_every_trace_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.memtable = MemTableOptions {
        shards: 2,
        flush_bytes: 16 << 10,
        max_age: Duration::from_secs(3600),
    };
    opts.compaction_threads = 0;
    // Small blocks, so that the walk crosses many and skips some.
    opts.index_block_parts = 8;
    let engine = Engine::open(opts).expect("open");

    let mut rng = Rng::new(32);
    let base = now() - 600 * SEC;
    let ids: Vec<TraceId> = (1..=400u128)
        .map(|t| TraceId((t * 7919).to_be_bytes()))
        .collect();
    let mut batches: Vec<Vec<Span>> = vec![Vec::new(); 4];
    for (i, id) in ids.iter().enumerate() {
        // Starts repeat, so the answer order falls back on trace IDs.
        let start = base + (i as u64 % 150) * SEC;
        let mut trace = spans(*id, arbitrary::trace(&mut rng, id.0, start));
        let batch = rng.below(4);
        if trace.len() > 1 && rng.chance(20) {
            // Part of the trace in a later batch: another file, or memory.
            let rest = trace.split_off(trace.len() / 2);
            batches[(batch + 1).min(3)].extend(rest);
        }
        batches[batch].extend(trace);
    }
    for (b, batch) in batches.into_iter().enumerate() {
        engine.write_blocking(batch).expect("write");
        if b < 3 {
            engine.flush().expect("flush");
        }
    }

    let every: Vec<(TraceId, Vec<Span>)> = ids
        .iter()
        .map(|id| (*id, engine.get_trace(id).expect("read")))
        .collect();
    let mut answered = 0;
    for round in 0..150 {
        let query = arbitrary::query(&mut rng);
        let limit = 1 + rng.below(30);
        let search = Search {
            query: Arc::new(Compiled::new(query.clone()).expect("compiles")),
            text: String::new(),
            start_unix_nano: if round % 3 == 0 { base + 40 * SEC } else { 0 },
            end_unix_nano: if round % 5 == 0 { base + 120 * SEC } else { 0 },
            limit,
            spans_per_spanset: 1000,
            candidates_only: false,
            span_window: false,
        };
        let mut want: Vec<super::Match> = every
            .iter()
            .filter_map(|(id, spans)| super::evaluate(&search, *id, spans).expect("decodes"))
            .collect();
        want.sort_by(|a, b| {
            b.start_unix_nano
                .cmp(&a.start_unix_nano)
                .then(a.trace_id.cmp(&b.trace_id))
        });
        want.truncate(limit);
        let got = run(&engine, &search, &Cancel::new()).expect("search");
        assert!(got.partial.is_empty(), "{:?}", got.partial);
        assert_eq!(
            got.value.iter().map(|m| m.trace_id).collect::<Vec<_>>(),
            want.iter().map(|m| m.trace_id).collect::<Vec<_>>(),
            "query {query:?}, limit {limit}"
        );
        assert_eq!(got.value, want, "query {query:?}");

        // What a tier asks its nodes for: the candidates of the query's
        // relaxation. The relaxation matches every trace the query
        // matches, and its candidates hold every trace the search finds,
        // each at the start of its newest part the index could not rule
        // out, which is never earlier than the trace's.
        let relaxation = super::relaxed(&query);
        let wide = |query: Arc<Compiled>, candidates_only| Search {
            query,
            text: String::new(),
            start_unix_nano: search.start_unix_nano,
            end_unix_nano: search.end_unix_nano,
            limit: super::MAX_LIMIT,
            spans_per_spanset: 1,
            candidates_only,
            span_window: false,
        };
        let relaxed = Arc::new(Compiled::new(relaxation.clone()).expect("compiles"));
        for (id, spans) in &every {
            if super::evaluate(&search, *id, spans)
                .expect("decodes")
                .is_some()
            {
                assert!(
                    super::evaluate(&wide(relaxed.clone(), false), *id, spans)
                        .expect("decodes")
                        .is_some(),
                    "{id} matches {query:?} but not its relaxation {relaxation}"
                );
            }
        }
        let all = run(&engine, &wide(search.query.clone(), false), &Cancel::new())
            .expect("search")
            .value;
        let candidates = run(&engine, &wide(relaxed, true), &Cancel::new())
            .expect("candidates")
            .value;
        assert!(candidates
            .windows(2)
            .all(|w| answer_order(&w[0], &w[1]).is_lt()));
        for m in &all {
            let c = candidates.iter().find(|c| c.trace_id == m.trace_id);
            assert!(
                c.is_some_and(|c| c.start_unix_nano >= m.start_unix_nano),
                "query {query:?}: {} found but {c:?} among the candidates of {relaxation}",
                m.trace_id
            );
        }
        for m in &got.value {
            // serviceStats counts every span once, under its service.
            let stats = &m.service_stats;
            assert_eq!(stats.iter().map(|s| s.spans).sum::<u64>(), m.span_count);
            assert_eq!(stats.iter().map(|s| s.errors).sum::<u64>(), m.error_count);
            assert!(stats.windows(2).all(|w| w[0].service < w[1].service));
            // Through a node's answer to the tier and back; two parts of
            // a trace add up service by service.
            let wire = super::from_proto(&super::to_proto(m)).expect("round trip");
            // A node's row may be a part of its trace: it claims no orphan
            // count, and says the rest as the node had it.
            assert_eq!(wire.orphans, None);
            assert!(
                m.orphans.is_some(),
                "a node's own match saw the whole trace"
            );
            assert_eq!(
                super::Match {
                    orphans: m.orphans,
                    ..wire.clone()
                },
                *m
            );
            let mut twice = wire.clone();
            super::combine(&mut twice, m, 1000);
            assert_eq!(twice.service_stats.len(), stats.len());
            for (a, b) in twice.service_stats.iter().zip(stats) {
                assert_eq!((a.spans, a.errors), (2 * b.spans, 2 * b.errors));
            }
        }
        answered += usize::from(!want.is_empty());
    }
    assert!(answered > 50, "only {answered} queries matched anything");
}

/// The index keeps at most 256 attributes of a trace part; a trace with
/// more is still found by the ones it did not keep.
#[test]
fn a_trace_with_more_attributes_than_the_index_keeps_is_found() {
    use prost::Message as _;
    use tracedb_proto::{
        common::v1::{any_value, AnyValue, KeyValue},
        resource::v1::Resource,
        trace::v1 as otlp,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    let engine = Engine::open(opts).expect("open");
    let start = now() - 60 * SEC;
    let attributes = (0..300)
        .map(|i| KeyValue {
            key: format!("k{i:03}"),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("v".into())),
            }),
        })
        .collect();
    let id = TraceId([3; 16]);
    let span = otlp::Span {
        trace_id: id.0.to_vec().into(),
        span_id: vec![1; 8].into(),
        name: "wide".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + SEC,
        attributes,
        ..Default::default()
    };
    let resource = Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("s".repeat(300))),
            }),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let parts = vec![(resource, Vec::new(), span.encode_to_vec())];
    engine.write_blocking(spans(id, parts)).expect("write");
    engine.flush().expect("flush");
    let found = |q: &str| -> usize {
        let search = Search {
            query: Arc::new(
                Compiled::new(tracedb_traceql::parse(q).expect("valid")).expect("compiles"),
            ),
            text: q.to_owned(),
            start_unix_nano: 0,
            end_unix_nano: 0,
            limit: 20,
            spans_per_spanset: 3,
            candidates_only: false,
            span_window: false,
        };
        run(&engine, &search, &Cancel::new())
            .expect("search")
            .value
            .len()
    };
    assert_eq!(found(r#"{ span.k000 = "v" }"#), 1);
    // A value longer than the index keeps (its resource's service name)
    // is still found by the spans.
    assert_eq!(
        tracedb_traceql::prune::MAX_INDEXED_VALUE_BYTES,
        tracedb_lsm::index::wire::MAX_VALUE_BYTES
    );
    let long = "s".repeat(300);
    assert_eq!(
        found(&format!(r#"{{ resource.service.name = "{long}" }}"#)),
        1
    );
    assert_eq!(
        found(r#"{ span.k299 = "v" }"#),
        1,
        "an attribute past the index's 256"
    );
    assert_eq!(found(r#"{ span.k299 = "w" }"#), 0);
}

/// A search that reads [`super::MAX_INSPECTED`] candidates without
/// reaching its limit stops and says so; one whose window holds fewer
/// reads them all and is whole.
#[test]
fn a_search_stops_after_its_most_candidates_and_says_so() {
    use prost::Message as _;
    use tracedb_proto::{
        common::v1::{any_value, AnyValue, KeyValue},
        resource::v1::Resource,
        trace::v1 as otlp,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    opts.memory_budget_bytes = 1 << 30;
    let engine = Engine::open(opts).expect("open");
    let resource = Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("cap".into())),
            }),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let int = |key: &str, v: i64| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
    };
    // Each trace has `a = 1` on one span and `b = 2` on the other: every
    // one is a candidate of `{ span.a = 1 && span.b = 2 }`, none a match.
    let base = now() - 600 * SEC;
    let traces = super::MAX_INSPECTED as u64 + 500;
    let at = |t: u64| base + t * 1_000;
    for chunk in (0..traces).collect::<Vec<_>>().chunks(10_000) {
        let mut batch = Vec::new();
        for &t in chunk {
            let id = TraceId((u128::from(t) + 1).to_be_bytes());
            let span = |n: u8, attribute: KeyValue| otlp::Span {
                trace_id: id.0.to_vec().into(),
                span_id: vec![n; 8].into(),
                parent_span_id: if n == 1 { Vec::new() } else { vec![1; 8] }.into(),
                name: "op".into(),
                start_time_unix_nano: at(t),
                end_time_unix_nano: at(t) + 500,
                attributes: vec![attribute],
                ..Default::default()
            };
            let parts = vec![
                (
                    resource.clone(),
                    Vec::new(),
                    span(1, int("a", 1)).encode_to_vec(),
                ),
                (
                    resource.clone(),
                    Vec::new(),
                    span(2, int("b", 2)).encode_to_vec(),
                ),
            ];
            batch.extend(spans(id, parts));
        }
        engine.write_blocking(batch).expect("write");
    }
    engine.flush().expect("flush");
    let q = "{ span.a = 1 && span.b = 2 }";
    let search = |start_unix_nano, end_unix_nano| Search {
        query: Arc::new(
            Compiled::new(tracedb_traceql::parse(q).expect("valid")).expect("compiles"),
        ),
        text: q.to_owned(),
        start_unix_nano,
        end_unix_nano,
        limit: 20,
        spans_per_spanset: 3,
        candidates_only: false,
        span_window: false,
    };
    let all = run(&engine, &search(0, 0), &Cancel::new()).expect("search");
    assert!(all.value.is_empty());
    assert_eq!(
        all.partial,
        vec![super::stopped_inspecting(super::MAX_INSPECTED)]
    );
    // The newest half: fewer candidates than the most, all read.
    let half = run(&engine, &search(at(traces / 2), 0), &Cancel::new()).expect("search");
    assert!(half.value.is_empty());
    assert!(half.partial.is_empty(), "{:?}", half.partial);

    // Every trace matches `{ span.a = 1 }`: asked for more than a search
    // answers, the answer is full and says older matches were left.
    let every = |limit| Search {
        query: Arc::new(
            Compiled::new(tracedb_traceql::parse("{ span.a = 1 }").expect("valid"))
                .expect("compiles"),
        ),
        text: "{ span.a = 1 }".to_owned(),
        limit,
        ..search(0, 0)
    };
    let most = run(&engine, &every(super::MAX_LIMIT), &Cancel::new()).expect("search");
    assert_eq!(most.value.len(), super::MAX_LIMIT);
    assert!(most.partial.is_empty(), "{:?}", most.partial);
    let more = run(&engine, &every(1500), &Cancel::new()).expect("search");
    assert_eq!(more.value, most.value);
    assert_eq!(
        more.partial,
        super::over_limit(1500, super::MAX_LIMIT)
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert!(!more.partial.is_empty());
}

/// A search takes what it holds from the memory budget: one that cannot
/// have its share is refused (retryably), and gives back what it took.
#[test]
fn a_search_the_memory_budget_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    opts.memory_budget_bytes = 256 << 10;
    let engine = Engine::open(opts).expect("open");
    let mut rng = Rng::new(5);
    let start = now() - 60 * SEC;
    let mut stored = 0;
    for t in 0..40u128 {
        let id = TraceId((t + 1).to_be_bytes());
        let trace = spans(id, arbitrary::trace(&mut rng, id.0, start));
        stored += usize::from(!trace.is_empty());
        engine.write_blocking(trace).expect("write");
    }
    engine.flush().expect("flush");
    let search = |limit| Search {
        query: Arc::new(
            Compiled::new(tracedb_traceql::parse("{}").expect("valid")).expect("compiles"),
        ),
        text: "{}".to_owned(),
        start_unix_nano: 0,
        end_unix_nano: 0,
        limit,
        spans_per_spanset: 1000,
        candidates_only: false,
        span_window: false,
    };
    let budget = engine.memory_budget();
    assert_eq!(
        run(&engine, &search(5), &Cancel::new())
            .expect("fits")
            .value
            .len(),
        5
    );
    assert_eq!(budget.in_flight(), 0, "given back");
    // Most of the budget taken by requests in flight: no room.
    let taken = budget.acquire(budget.admit_limit() - 1024).expect("room");
    match run(&engine, &search(5), &Cancel::new()) {
        Err(super::RunError::Overloaded(_)) => {}
        other => panic!("{:?}", other.map(|a| a.value.len())),
    }
    drop(taken);
    assert_eq!(budget.in_flight(), 0, "given back after a refusal too");
    assert_eq!(
        run(&engine, &search(40), &Cancel::new())
            .expect("fits again")
            .value
            .len(),
        stored
    );
}

/// A search whose caller has gone stops at its next candidate, full or of
/// candidates only, and gives back what it held.
#[test]
fn a_cancelled_search_stops_and_gives_back_its_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    let engine = Engine::open(opts).expect("open");
    let mut rng = Rng::new(9);
    let start = now() - 60 * SEC;
    for t in 0..20u128 {
        let id = TraceId((t + 1).to_be_bytes());
        engine
            .write_blocking(spans(id, arbitrary::trace(&mut rng, id.0, start)))
            .expect("write");
    }
    engine.flush().expect("flush");
    let budget = engine.memory_budget();
    for candidates_only in [false, true] {
        let search = Search {
            query: Arc::new(
                Compiled::new(tracedb_traceql::parse("{}").expect("valid")).expect("compiles"),
            ),
            text: "{}".to_owned(),
            start_unix_nano: 0,
            end_unix_nano: 0,
            limit: 5,
            spans_per_spanset: 1000,
            candidates_only,
            span_window: false,
        };
        let answered = run(&engine, &search, &Cancel::new()).expect("answers");
        assert_eq!(
            answered.value.len(),
            5,
            "candidates only: {candidates_only}"
        );
        let cancel = Cancel::new();
        cancel.cancel();
        match run(&engine, &search, &cancel) {
            Err(super::RunError::Cancelled) => {}
            other => panic!("{:?}", other.map(|a| a.value.len())),
        }
        assert_eq!(budget.in_flight(), 0, "given back");
    }
}
