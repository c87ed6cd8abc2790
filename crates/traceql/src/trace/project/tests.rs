//! A trace decoded for a query against the same trace decoded whole.

use prost::Message as _;
use tracedb_proto::{
    common::v1::{any_value, AnyValue, KeyValue},
    trace::v1 as otlp,
};

use super::Projection;
use crate::{
    arbitrary::{self, EncodedParts, Rng},
    metrics::{Grid, MetricsEval},
    parse,
    trace::{EncodedSpan, Trace},
    Compiled,
};

const SEC: u64 = 1_000_000_000;

fn decode(parts: &[EncodedParts], id: [u8; 16], p: &Projection) -> Trace {
    Trace::decode_for(
        id,
        parts.iter().map(|(r, s, payload)| EncodedSpan {
            payload,
            resource: Some(r),
            scope: Some(s),
        }),
        p,
    )
    .expect("generated spans decode")
}

/// What the projection keeps of a whole span: the attributes it names, in
/// order, and events and links only if it reads them.
fn projected(whole: &Trace, p: &Projection) -> Trace {
    let mut t = whole.clone();
    for s in &mut t.spans {
        s.attributes.retain(|(k, _)| p.wants(k.as_bytes()));
        if !p.events {
            s.events.clear();
        }
        if !p.links {
            s.links.clear();
        }
    }
    t
}

/// Metrics queries that read span attributes, events and links, `nil` and
/// every attribute (`compare()`).
const METRICS: &[&str] = &[
    "{ span.a > 1 } | rate() by(span.b)",
    "{ .b = \"x\" } | count_over_time() by(resource.service.name)",
    "{ span.c = true } | avg_over_time(span.f) by(.region)",
    "{ span.a != nil } | sum_over_time(span.a)",
    "{ event.e = 1 } | rate() by(event:name)",
    "{ link:traceID != \"\" } | rate()",
    "{ span.arr = \"x\" } | quantile_over_time(duration, 0.5) by(span.c)",
    "{ status = error } | compare({ span.a = 2 })",
    "{ } | max_over_time(span.f) by(span.b, resource.region)",
];

#[test]
fn a_trace_decoded_for_a_query_answers_it_as_the_whole_trace_does() {
    let mut rng = Rng::new(43);
    let traces: Vec<(Vec<EncodedParts>, [u8; 16])> = (0..80u8)
        .map(|t| {
            let id = [t; 16];
            (arbitrary::trace(&mut rng, id, 1_000 * SEC), id)
        })
        .collect();
    let wholes: Vec<Trace> = traces
        .iter()
        .map(|(parts, id)| decode(parts, *id, &Projection::all()))
        .collect();
    let mut queries: Vec<_> = (0..500).map(|_| arbitrary::query(&mut rng)).collect();
    queries.extend(METRICS.iter().map(|q| parse(q).expect("a valid query")));
    let (mut fewer, mut matched) = (0, 0);
    for query in queries {
        let p = Projection::of(&query);
        let compiled = Compiled::new(query).expect("regexes compile");
        let grid = Grid::range(1_000 * SEC, 1_002 * SEC, SEC);
        let mut evals = compiled.query.metrics.as_ref().map(|_| {
            let new = || MetricsEval::new(&compiled, grid, 1_000, 100).expect("metrics");
            (new(), new())
        });
        for ((parts, id), whole) in traces.iter().zip(&wholes) {
            let part = decode(parts, *id, &p);
            assert_eq!(part, projected(whole, &p), "{}", compiled.query);
            let attrs = |t: &Trace| t.spans.iter().map(|s| s.attributes.len()).sum::<usize>();
            fewer += usize::from(attrs(&part) < attrs(whole));
            let sets = compiled.eval(&part);
            assert_eq!(sets, compiled.eval(whole), "{}", compiled.query);
            matched += usize::from(!sets.is_empty());
            if let Some((a, b)) = &mut evals {
                a.observe(&compiled, &part, &sets);
                b.observe(&compiled, whole, &sets);
            }
        }
        if let Some((a, b)) = evals {
            assert_eq!(a.finish(), b.finish(), "{}", compiled.query);
        }
    }
    // The test means something: spans lost attributes, and queries matched.
    assert!(
        fewer > 1_000,
        "{fewer} traces decoded with fewer attributes"
    );
    assert!(matched > 1_000, "{matched} matches");
}

#[test]
fn what_the_query_reads_is_what_is_decoded() {
    let p = |q: &str| Projection::of(&parse(q).expect("a valid query"));
    let keys = |k: &[&str]| Some(k.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let some = p("{ span.a = 1 && .b = \"x\" && resource.r = 2 } | rate() by(span.c)");
    assert_eq!(some.span_keys, keys(&["a", "b", "c"]));
    assert!(!some.events && !some.links);
    assert!(p("{ event:name = \"x\" }").events);
    assert!(p("{ event.e = 1 }").events);
    assert!(p("{ link:spanID = \"x\" }").links);
    assert_eq!(p("{ } | select(span.s)").span_keys, keys(&["s"]));
    assert_eq!(p("{ } | avg_over_time(span.d)").span_keys, keys(&["d"]));
    assert_eq!(p("{ span.a = nil }").span_keys, None);
    assert_eq!(p("{ .a != nil }").span_keys, keys(&["a"]));
    assert_eq!(p("{ } | compare({ span.a = 1 })"), Projection::all());
}

/// `(field, wire type)` key bytes, then `body`.
fn field(number: u64, wire: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    tracedb_proto::wire::put_varint(&mut out, number << 3 | wire);
    if wire == 2 {
        tracedb_proto::wire::put_varint(&mut out, body.len() as u64);
    }
    out.extend_from_slice(body);
    out
}

fn kv(key: &str, v: i64) -> Vec<u8> {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
    }
    .encode_to_vec()
}

#[test]
fn odd_encodings_decode_as_prost_decodes_them_or_whole() {
    let p = Projection::of(&parse("{ span.a = 1 }").expect("a valid query"));
    let base = otlp::Span {
        span_id: vec![1; 8].into(),
        name: "n".into(),
        start_time_unix_nano: 5,
        end_time_unix_nano: 9,
        ..Default::default()
    }
    .encode_to_vec();
    let cases: Vec<Vec<u8>> = vec![
        // Fields sent twice: the last ID and name, both statuses merged.
        [
            base.clone(),
            field(2, 2, &[2; 8]),
            field(5, 2, b"m"),
            field(15, 2, &field(2, 2, b"why")),
            field(15, 2, &[0x18, 2]),
        ]
        .concat(),
        // Unknown fields of every wire type, and a key sent twice.
        [
            base.clone(),
            field(99, 0, &[0x96, 0x01]),
            field(98, 1, &[7; 8]),
            field(97, 2, b"xyz"),
            field(96, 5, &[7; 4]),
            field(9, 2, &[field(1, 2, b"b"), kv("a", 3)].concat()),
            field(9, 2, &kv("z", 4)),
            field(9, 2, &[kv("a", 5), field(1, 2, b"z")].concat()),
        ]
        .concat(),
        // A group and a known field of another type: decoded whole.
        [base.clone(), field(95, 3, &[]), field(95, 4, &[])].concat(),
        [base.clone(), field(7, 0, &[3])].concat(),
    ];
    for (i, payload) in cases.iter().enumerate() {
        let spans = || {
            [EncodedSpan {
                payload,
                resource: None,
                scope: None,
            }]
        };
        let whole = Trace::decode([1; 16], spans());
        let part = Trace::decode_for([1; 16], spans(), &p);
        match (whole, part) {
            (Ok(whole), Ok(part)) => assert_eq!(part, projected(&whole, &p), "case {i}"),
            (whole, part) => assert!(
                whole.is_err() && part.is_err(),
                "case {i}: {whole:?} {part:?}"
            ),
        }
    }
    // A damaged span: whatever prost reads whole, the projection reads the
    // same of it.
    let mut rng = Rng::new(7);
    let payload = &cases[1];
    for _ in 0..2_000 {
        let mut bytes = payload.clone();
        let at = rng.below(bytes.len());
        if rng.chance(50) {
            bytes.truncate(at);
        } else {
            bytes[at] = rng.next_u64() as u8;
        }
        let spans = || {
            [EncodedSpan {
                payload: &bytes,
                resource: None,
                scope: None,
            }]
        };
        if let Ok(whole) = Trace::decode([1; 16], spans()) {
            let part = Trace::decode_for([1; 16], spans(), &p).expect("what prost reads");
            assert_eq!(part, projected(&whole, &p));
        }
    }
}
