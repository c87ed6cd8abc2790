use prost::Message as _;
use tracedb_proto::{
    common::v1::{any_value, AnyValue, KeyValue},
    resource::v1::Resource,
    trace::v1::Span,
};

use super::RawNeeds;
use crate::{
    arbitrary::{self, Rng},
    trace::{EncodedSpan, Trace},
    Compiled,
};

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
    }
}

/// One stored span: (payload, resource), named `name`, with `span` and
/// `resource` attributes.
fn stored(name: &str, span: &[(&str, &str)], resource: &[(&str, &str)]) -> (Vec<u8>, Vec<u8>) {
    let payload = Span {
        trace_id: vec![1; 16].into(),
        span_id: vec![2; 8].into(),
        name: name.to_owned(),
        attributes: span.iter().map(|(k, v)| text(k, v)).collect(),
        ..Span::default()
    }
    .encode_to_vec();
    let resource = Resource {
        attributes: resource.iter().map(|(k, v)| text(k, v)).collect(),
        ..Resource::default()
    }
    .encode_to_vec();
    (payload, resource)
}

fn may_match(query: &str, spans: &[(Vec<u8>, Vec<u8>)]) -> Option<bool> {
    let needs = RawNeeds::of(&crate::parse(query).expect("parses"))?;
    Some(needs.may_match(spans.iter().map(|(p, r)| EncodedSpan {
        payload: p,
        resource: Some(r),
        scope: None,
    })))
}

#[test]
fn a_trace_is_passed_over_only_where_no_span_holds_a_needs_bytes() {
    let root = stored(
        "GET /cart",
        &[("tenant", "acme")],
        &[("service.name", "front"), ("region", "eu")],
    );
    let child = stored("SELECT", &[("db", "pg")], &[("service.name", "cart")]);
    let trace = [child.clone(), root];
    for (query, want) in [
        // Where each scope keeps its bytes.
        (r#"{ span.tenant = "acme" }"#, true),
        (r#"{ span.tenant = "umbrella" }"#, false),
        (r#"{ resource.tenant = "acme" }"#, false),
        (r#"{ .tenant = "acme" }"#, true),
        (r#"{ .region = "eu" }"#, true),
        (r#"{ span.region = "eu" }"#, false),
        (r#"{ resource.region = "eu" }"#, true),
        (r#"{ resource.service.name = "front" }"#, true),
        (r#"{ resource.service.name = "back" }"#, false),
        (r#"{ name = "SELECT" }"#, true),
        (r#"{ name = "INSERT" }"#, false),
        // A number's or a bool's key only.
        ("{ span.tenant = 7 }", true),
        ("{ span.status_code = 500 }", false),
        ("{ span.db = true }", true),
        // The checks of one need hold on one span.
        (r#"{ span.tenant = "acme" && name = "GET /cart" }"#, true),
        (r#"{ span.tenant = "acme" && name = "SELECT" }"#, false),
        (
            r#"{ span.tenant = "acme" && resource.service.name = "cart" }"#,
            false,
        ),
        // Each need on some span.
        (r#"{ span.tenant = "acme" } && { span.db = "pg" }"#, true),
        (r#"{ span.tenant = "acme" } >> { name = "INSERT" }"#, false),
        (r#"{ span.tenant = "acme" } | { span.db = "pg" }"#, true),
    ] {
        assert_eq!(may_match(query, &trace), Some(want), "{query}");
    }
    // The root alone holds the tenant.
    assert_eq!(
        may_match(r#"{ span.tenant = "acme" }"#, &[child]),
        Some(false)
    );
    // Nothing to check: no needs, or none in bytes.
    for query in [
        "{ }",
        r#"{ span.tenant != "acme" }"#,
        r#"{ span.tenant = "acme" } || { name = "x" }"#,
        "{ kind = server && status = error }",
        r#"{ event.tenant = "acme" }"#,
    ] {
        assert_eq!(may_match(query, &trace), None, "{query}");
    }
}

/// Sixty random traces: their IDs and stored spans.
fn random_traces(rng: &mut Rng) -> Vec<([u8; 16], Vec<arbitrary::EncodedParts>)> {
    (0..60u8)
        .map(|t| {
            let id = [t; 16];
            (id, arbitrary::trace(rng, id, 1_000_000_000))
        })
        .collect()
}

/// Generated spans as the evaluator reads their stored bytes.
fn stored_spans(
    parts: &[arbitrary::EncodedParts],
) -> impl Iterator<Item = EncodedSpan<'_>> + Clone {
    parts.iter().map(|(r, s, p)| EncodedSpan {
        payload: p,
        resource: Some(r),
        scope: Some(s),
    })
}

/// On random traces and queries: a trace the bytes pass over matches
/// nothing, and they pass over some.
#[test]
fn a_trace_passed_over_matches_no_query_on_random_traces_and_queries() {
    let mut rng = Rng::new(43);
    let traces: Vec<_> = random_traces(&mut rng)
        .into_iter()
        .map(|(id, parts)| {
            let trace = Trace::decode(id, stored_spans(&parts)).expect("generated spans decode");
            (parts, trace)
        })
        .collect();
    let (mut checked, mut passed_over) = (0, 0);
    for _ in 0..600 {
        let query = arbitrary::query(&mut rng);
        let Some(needs) = RawNeeds::of(&query) else {
            continue;
        };
        checked += 1;
        let compiled = Compiled::new(query.clone()).expect("regexes compile");
        for (parts, trace) in &traces {
            if !needs.may_match(stored_spans(parts)) {
                passed_over += 1;
                assert!(
                    compiled.eval(trace).is_empty(),
                    "{query} matched a trace passed over: {:?}",
                    trace.trace_id
                );
            }
        }
    }
    assert!(checked > 100, "{checked} queries had needs in bytes");
    assert!(passed_over > 1_000, "{passed_over} traces passed over");
}

/// The spans a query matches, by their IDs.
fn matched_ids(compiled: &Compiled, trace: &Trace) -> Vec<[u8; 8]> {
    let mut ids: Vec<[u8; 8]> = compiled
        .eval(trace)
        .iter()
        .flat_map(|set| set.spans.iter().map(|&i| trace.spans[i].span_id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// On random traces and queries: where a query's matches each hold its
/// bytes, the trace decoded without the spans that do not hold them has
/// the same matches as the whole trace, and some spans are left out.
#[test]
fn spans_left_out_by_their_bytes_change_no_match_on_random_traces_and_queries() {
    let mut rng = Rng::new(44);
    let traces = random_traces(&mut rng);
    let (mut checked, mut left_out) = (0, 0);
    for _ in 0..4000 {
        let query = arbitrary::query(&mut rng);
        let Some(needs) = RawNeeds::of_each_span(&query) else {
            continue;
        };
        checked += 1;
        let compiled = Compiled::new(query.clone()).expect("regexes compile");
        for (id, parts) in &traces {
            let whole = Trace::decode(*id, stored_spans(parts)).expect("generated spans decode");
            let some = Trace::decode(*id, stored_spans(parts).filter(|s| needs.span_may_match(s)))
                .expect("decodes");
            left_out += whole.spans.len() - some.spans.len();
            assert_eq!(
                matched_ids(&compiled, &whole),
                matched_ids(&compiled, &some),
                "{query} on {id:?}"
            );
        }
    }
    assert!(checked > 50, "{checked} queries had needs of each span");
    assert!(left_out > 1_000, "{left_out} spans left out");
}

#[test]
fn spans_are_left_out_only_where_no_other_span_decides_a_match() {
    let each = |q: &str| RawNeeds::of_each_span(&crate::parse(q).expect("parses")).is_some();
    assert!(each(
        r#"{ span.tenant = "acme" } | rate() by(resource.service.name)"#
    ));
    assert!(each(r#"{ span.tenant = "acme" && kind = server }"#));
    // Other spans decide: a structure, two spansets, a place in the tree.
    assert!(!each(r#"{ span.tenant = "acme" } >> { status = error }"#));
    assert!(!each(r#"{ span.tenant = "acme" } && { name = "x" }"#));
    assert!(!each(r#"{ span.tenant = "acme" } || { name = "x" }"#));
    assert!(!each(r#"{ span.tenant = "acme" && nestedSetParent < 0 }"#));
    assert!(!each(r#"{ span.tenant = "acme" && trace:rootName = "x" }"#));
    assert!(!each(r#"{ span.tenant = "acme" } | count() > 1"#));
    // No bytes to check.
    assert!(!each(r#"{ span.tenant != "acme" }"#));
    // A span is kept only where it holds every check of the need.
    let (payload, resource) = stored(
        "GET /cart",
        &[("tenant", "acme")],
        &[("service.name", "front")],
    );
    let span = EncodedSpan {
        payload: &payload,
        resource: Some(&resource),
        scope: None,
    };
    let kept = |q: &str| {
        RawNeeds::of_each_span(&crate::parse(q).expect("parses"))
            .expect("checks each span")
            .span_may_match(&span)
    };
    assert!(kept(r#"{ span.tenant = "acme" && name = "GET /cart" }"#));
    assert!(kept(
        r#"{ span.tenant = "acme" && resource.service.name = "front" }"#
    ));
    assert!(!kept(r#"{ span.tenant = "acme" && name = "SELECT" }"#));
    assert!(!kept(
        r#"{ span.tenant = "umbrella" && name = "GET /cart" }"#
    ));
    assert!(!kept(
        r#"{ span.tenant = "acme" && resource.service.name = "cart" }"#
    ));
}
