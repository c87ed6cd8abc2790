use std::{collections::BTreeSet, path::Path, sync::Arc};

use super::{
    build::{Interner, MAX_REMEMBERED_ATTRIBUTES},
    *,
};
use crate::{
    span::{ScopeGroup, Span, TraceId},
    test_util::{group, span},
};

#[test]
fn summaries_do_not_keep_the_spans_buffers_alive() {
    // A block's spans and groups are slices of one decompressed buffer; a
    // builder that held on to them would pin that buffer until its file is
    // finished.
    let buffer = bytes::Bytes::from(vec![0u8; 4096]);
    let g = Arc::new(ScopeGroup {
        resource: Some(buffer.slice(0..0)),
        resource_schema_url: buffer.slice(0..8),
        scope: None,
        scope_schema_url: bytes::Bytes::new(),
    });
    let mut builder = SummaryBuilder::default();
    let mut s = span(&g, 1, 1, 1);
    s.payload = buffer.slice(8..8);
    builder.add(&s);
    drop((s, g));
    assert!(
        buffer.is_unique(),
        "the summary builder still references the block buffer"
    );
    assert_eq!(builder.finish().traces.len(), 1);
}

/// An encoded `Resource` with the attributes `attrs` (string values).
fn resource(attrs: &[(&str, &str)]) -> Arc<ScopeGroup> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        out.push(u8::try_from(bytes.len()).expect("short"));
        out.extend_from_slice(bytes);
    }
    let mut r = Vec::new();
    for (k, v) in attrs {
        let (mut kv, mut any) = (Vec::new(), Vec::new());
        field(&mut any, 1, v.as_bytes());
        field(&mut kv, 1, k.as_bytes());
        field(&mut kv, 2, &any);
        field(&mut r, 1, &kv);
    }
    Arc::new(ScopeGroup {
        resource: Some(r.into()),
        ..ScopeGroup::default()
    })
}

#[test]
fn a_trace_summarized_whole_has_each_spans_own_service_and_resource_tags() {
    let front = resource(&[("service.name", "front"), ("zone", "a")]);
    let back = resource(&[("service.name", "back"), ("zone", "b")]);
    // The same resource behind another Arc, as a second request brings it.
    let back_again = resource(&[("service.name", "back"), ("zone", "b")]);
    let spans = vec![
        span(&front, 1, 1, 10),
        span(&back, 1, 2, 20),
        span(&back, 1, 3, 30),
        span(&front, 1, 4, 40),
        span(&back_again, 1, 5, 50),
    ];
    let whole = SummarySet::from_sorted_spans(&spans);
    assert_eq!(whole, SummarySet::from_spans(&spans));
    let t = &whole.traces[0];
    let services: BTreeSet<&str> = t.ops.iter().map(|o| whole.str(o.service)).collect();
    assert_eq!(services, BTreeSet::from(["back", "front"]));
    let zones: BTreeSet<&str> = t
        .tags
        .iter()
        .filter(|g| whole.str(g.key) == "zone")
        .map(|g| whole.str(g.value))
        .collect();
    assert_eq!(zones, BTreeSet::from(["a", "b"]));
    assert_eq!(t.span_count, 5);
}

#[test]
fn a_sidecar_built_part_by_part_is_the_sidecar_of_the_whole_set() {
    let (a, b) = (group("checkout"), group("payments"));
    let mut spans: Vec<Span> = (0..120u64)
        .map(|i| span(if i % 3 == 0 { &a } else { &b }, u128::from(i % 11), i, i))
        .collect();
    crate::sort::sort_by_trace_id(&mut spans);
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    let mut builder = SidecarBuilder::new(16);
    for trace in spans.chunk_by(|x, y| x.trace_id == y.trace_id) {
        builder.add_trace(trace);
    }
    builder.write(&table).expect("written");
    let written = std::fs::read(sidecar_path(&table)).expect("read");
    let whole = SummarySet::from_sorted_spans(&spans);
    assert_eq!(whole.traces.len(), 11);
    // Trace by trace in reused scratch space, as span by span with a
    // fresh part per trace.
    assert_eq!(whole, SummarySet::from_spans(&spans));
    // The cells of every span it summarized follow the blocks.
    let mut cells = super::cells::CellsBuilder::default();
    cells.add_all(&spans);
    let mut want = encode_sidecar(&whole, 16);
    want.extend(super::cells::encode(&cells.finish().expect("cells")));
    assert_eq!(written, want);
}

#[test]
fn parts_carried_over_from_several_sidecars_keep_their_own_strings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let front = resource(&[("service.name", "front"), ("zone", "a")]);
    let back = resource(&[("service.name", "back"), ("zone", "b")]);
    // Two inputs whose string tables hold other strings at the same
    // indices: traces 0, 2, 4 of "front" in one, 1, 3, 5 of "back" (and
    // trace 5 also of "db") in the other.
    let input = |first: u128, g: &Arc<ScopeGroup>| -> Vec<Span> {
        (0..3u128)
            .flat_map(|k| {
                let t = first + 2 * k;
                [span(g, t, 1, 10), span(g, t, 2, 20)]
            })
            .collect()
    };
    let x = input(0, &front);
    let y: Vec<Span> = input(1, &back)
        .into_iter()
        .chain([span(&resource(&[("service.name", "db")]), 5, 3, 30)])
        .collect();
    let open = |name: &str, spans: &[Span]| {
        let table = dir.path().join(name);
        write_sidecar(&table, &SummarySet::from_sorted_spans(spans), 16, None).expect("written");
        SidecarParts::open(&table).expect("opened")
    };
    let mut parts = [open("x.sst", &x), open("y.sst", &y)];
    let mut builder = SidecarBuilder::new(16);
    for t in 0..6u128 {
        let input = (t % 2) as usize;
        let id = TraceId(t.to_be_bytes());
        let part = parts[input]
            .find(&id)
            .expect("reads")
            .expect("has the trace");
        builder.add_part(input, &parts[input], part);
    }
    let table = dir.path().join("out.sst");
    builder.write(&table).expect("written");
    let mut all: Vec<Span> = x.into_iter().chain(y).collect();
    crate::sort::sort_by_trace_id(&mut all);
    let rebuilt = SummarySet::from_sorted_spans(&all);
    let carried = read_sidecar(&table).expect("reads");
    type Named<'a> = Vec<(BTreeSet<&'a str>, BTreeSet<(&'a str, &'a str)>)>;
    fn named(set: &SummarySet) -> Named<'_> {
        set.traces
            .iter()
            .map(|t| {
                let ops = t.ops.iter().map(|o| set.str(o.service)).collect();
                let tags = t
                    .tags
                    .iter()
                    .map(|g| (set.str(g.key), set.str(g.value)))
                    .collect();
                (ops, tags)
            })
            .collect()
    }
    assert_eq!(named(&carried), named(&rebuilt));
    let services: Vec<Vec<&str>> = named(&carried)
        .into_iter()
        .map(|(ops, _)| ops.into_iter().collect())
        .collect();
    let (f, b): (&[&str], &[&str]) = (&["front"], &["back"]);
    assert_eq!(services, [f, b, f, b, f, &["back", "db"]]);
}

/// An encoded `KeyValue`: `key` and an `AnyValue` of field `number`
/// (1 string, 3 int) holding `value` (bytes, or a varint for an int).
fn encoded_attribute(key: &str, number: u8, value: &[u8]) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        let mut len = bytes.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(bytes);
    }
    let mut any = Vec::new();
    if number == 3 {
        any.push(3 << 3);
        any.extend_from_slice(value);
    } else {
        field(&mut any, number, value);
    }
    let mut kv = Vec::new();
    field(&mut kv, 1, key.as_bytes());
    field(&mut kv, 2, &any);
    kv
}

#[test]
fn an_attribute_read_again_resolves_as_it_did_the_first_time() {
    let mut names = Interner::default();
    let read = |names: &mut Interner, kv: &[u8]| {
        names.attribute(kv).map(|(k, v, _)| {
            (
                names.strings[k as usize].clone(),
                names.strings[v as usize].clone(),
            )
        })
    };
    let method = encoded_attribute("http.method", 1, b"GET");
    // 200 as a varint: 0xc8 0x01.
    let status = encoded_attribute("http.status_code", 3, &[0xc8, 0x01]);
    let long = encoded_attribute("body", 1, &[b'x'; wire::MAX_VALUE_BYTES + 1]);
    let not_utf8 = encoded_attribute("name", 1, &[0xff, 0xfe]);
    let pair = |k: &str, v: &str| Some((k.to_owned(), v.to_owned()));
    for _ in 0..2 {
        assert_eq!(read(&mut names, &method), pair("http.method", "GET"));
        assert_eq!(read(&mut names, &status), pair("http.status_code", "200"));
        // Kept as there, without their values.
        assert_eq!(read(&mut names, &long), pair("body", ""));
        assert_eq!(read(&mut names, &not_utf8), pair("name", ""));
    }
    assert_eq!(names.attributes.len(), 4);
    // Past the limit, attributes are still read right, each time.
    let mut i = 0u32;
    while names.attributes.len() < MAX_REMEMBERED_ATTRIBUTES {
        names.attribute(&encoded_attribute("n", 1, i.to_string().as_bytes()));
        i += 1;
    }
    let past = encoded_attribute("tenant", 1, b"acme");
    for _ in 0..2 {
        assert_eq!(read(&mut names, &past), pair("tenant", "acme"));
    }
    assert_eq!(names.attributes.len(), MAX_REMEMBERED_ATTRIBUTES);
    assert_eq!(read(&mut names, &method), pair("http.method", "GET"));
}

#[test]
fn sidecar_round_trips_and_refuses_damage() {
    let g = group("svc");
    let spans: Vec<Span> = (0..50u64)
        .map(|i| span(&g, u128::from(i % 7), i, i))
        .collect();
    let set = SummarySet::from_spans(&spans);
    assert_eq!(set.traces.len(), 7);
    let bytes = encode_sidecar(&set, 16);
    let path = Path::new("x.idx");
    assert_eq!(decode_sidecar(path, &bytes).expect("decodes"), set);
    for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
        assert!(decode_sidecar(path, &bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut flipped = bytes.clone();
    flipped[20] ^= 1;
    assert!(decode_sidecar(path, &flipped).is_err());
}

/// Seeded mutations of a sidecar of several blocks (the mutations the
/// sorted files get: flipped bits, overwritten runs, truncation, a zeroed
/// page, huge length fields, inserted bytes), and plain random bytes, read
/// the three ways the server reads one: whole (`decode_sidecar`, at open),
/// part by part (`SidecarParts`, compaction) and block by block through its
/// digest (`open_index`, search; every 40th input, as these two read a
/// file). Each must refuse the input or answer the summaries written: never
/// panic, never read past the input, never allocate from a length field.
/// `TRACEDB_FUZZ_ITERS` multiplies the count.
#[test]
fn mutated_sidecars_are_refused_or_read_right_never_a_panic() {
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    use crate::table::hostile::{iters, mutate};

    let groups = [
        resource(&[("service.name", "front"), ("zone", "a")]),
        resource(&[("service.name", "back"), ("zone", "b"), ("pod", "p-1")]),
        group("jobs"),
    ];
    let mut spans: Vec<Span> = (0..400u64)
        .map(|i| span(&groups[(i % 3) as usize], u128::from(i % 37), i, i * 1_000))
        .collect();
    crate::sort::sort_by_trace_id(&mut spans);
    let set = SummarySet::from_sorted_spans(&spans);
    // Four parts a block: ten blocks.
    let good = encode_sidecar(&set, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    let path = sidecar_path(&table);
    std::fs::write(&path, &good).expect("write");
    let index = open_index(&table).expect("the good sidecar opens");
    assert!(index.blocks.len() >= 8, "{} blocks", index.blocks.len());
    let blocks: Vec<SummarySet> = (0..index.blocks.len())
        .map(|i| index.block(i).expect("a good block"))
        .collect();

    let mut rng = SmallRng::seed_from_u64(0x51dec4);
    let n = iters(200_000);
    let (mut refused, mut read) = (0usize, 0usize);
    for round in 0..n {
        let bytes = if round % 10 == 9 {
            let mut b = vec![0u8; rng.random_range(0..good.len() * 2)];
            rng.fill(&mut b[..]);
            b
        } else {
            let mut b = good.clone();
            for _ in 0..rng.random_range(1..3) {
                mutate(&mut rng, &mut b);
            }
            b
        };
        // Whole.
        let whole = decode_sidecar(&path, &bytes);
        if let Ok(got) = &whole {
            assert_eq!(got, &set, "round {round}: decoded, so unchanged");
        }
        if whole.is_ok() {
            read += 1;
        } else {
            refused += 1;
        }
        if round % 40 != 0 {
            continue;
        }
        // Part by part, as compaction carries parts over.
        std::fs::write(&path, &bytes).expect("write");
        let by_parts = SidecarParts::open(&table).and_then(|mut parts| {
            set.traces
                .iter()
                .map(|t| parts.find(&t.trace_id))
                .collect::<crate::Result<Vec<_>>>()
        });
        if let Ok(found) = &by_parts {
            let want: Vec<Option<TraceSummary>> = set.traces.iter().cloned().map(Some).collect();
            assert_eq!(found, &want, "round {round}: read, so unchanged");
        }
        // Block by block, as search walks it.
        let by_blocks = open_index(&table).and_then(|index| {
            (0..index.blocks.len())
                .map(|i| index.block(i))
                .collect::<crate::Result<Vec<_>>>()
        });
        if let Ok(got) = &by_blocks {
            assert_eq!(got, &blocks, "round {round}: read, so unchanged");
        }
        // The three readers check the same bytes: they agree.
        assert_eq!(
            (whole.is_ok(), by_parts.is_ok()),
            (by_blocks.is_ok(), by_blocks.is_ok()),
            "round {round}: the readers disagree"
        );
    }
    // Most mutations are caught; a few land where nothing is read (the
    // bytes past the last frame a truncation cuts to the same length).
    assert!(refused > n * 9 / 10, "{refused} of {n} refused");
    println!("sidecars: {n} hostile inputs, {refused} refused, {read} read unchanged");
}
