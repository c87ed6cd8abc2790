//! The metrics stage's grammar: what parses, how it prints back, and the
//! refusals of bad arguments, at their column.

use crate::{
    ast::{Attribute, CmpOp, Intrinsic, MetricsFn, Scope, SecondStage, Static},
    parse,
};

/// `text` parses, prints as `printed`, and that parses to the same tree.
#[track_caller]
fn prints_as(text: &str, printed: &str) {
    let q = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(q.to_string(), printed, "{text}");
    let back = parse(printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
    assert_eq!(back, q, "{printed}");
}

#[track_caller]
fn refused_at(text: &str, column: usize, needle: &str) {
    match parse(text) {
        Ok(q) => panic!("{text} parsed as {q:?}"),
        Err(e) => {
            assert_eq!(e.column, column, "{text}: {}", e.message);
            assert!(
                e.message.contains(needle),
                "{text}: {:?} lacks {needle:?}",
                e.message
            );
        }
    }
}

fn attr(scope: Scope, name: &str) -> Attribute {
    Attribute::Attr {
        scope,
        name: name.into(),
    }
}

#[test]
fn drilldowns_queries_parse_verbatim() {
    for q in [
        "{} | rate()",
        "{nestedSetParent<0 && true} | rate()  with(sample=true)",
        "{nestedSetParent<0 && true && status=error} | rate()  with(sample=true)",
        "{nestedSetParent<0 && true} | histogram_over_time(duration) with(sample=true)",
        "{nestedSetParent<0 && true && resource.service.name != nil} | rate() by(resource.service.name)",
        "{nestedSetParent<0 && true && resource.service.name != nil} | quantile_over_time(duration, 0.9) by(resource.service.name)",
        "{nestedSetParent<0 && true} | compare({duration >= 0ms && duration <= 2s}, 10, 1728987791000000000, 1728988006000000000)",
        "({nestedSetParent<0 && true} &>> { kind = server }) || ({nestedSetParent<0 && true}) | select(status, resource.service.name, name, nestedSetParent, nestedSetLeft, nestedSetRight)",
        "{nestedSetParent<0 && true && status = error} | select(resource.service.name, event.exception.message,event.exception.stacktrace,event.exception.type) with(most_recent=true)",
    ] {
        let parsed = parse(q).unwrap_or_else(|e| panic!("{q}: {e}"));
        let printed = parsed.to_string();
        assert_eq!(parse(&printed).as_ref(), Ok(&parsed), "{q} printed as {printed}");
    }
}

#[test]
fn every_function_parses_and_prints_back() {
    prints_as("{ } | rate()", "{ true } | rate()");
    prints_as(
        "{} | count_over_time() by (name, span.a)",
        "{ true } | count_over_time() by(span:name, span.a)",
    );
    prints_as(
        "{} | min_over_time(duration)",
        "{ true } | min_over_time(span:duration)",
    );
    prints_as(
        "{} | max_over_time(span.size)",
        "{ true } | max_over_time(span.size)",
    );
    prints_as(
        "{} | sum_over_time(.n) by(kind)",
        "{ true } | sum_over_time(.n) by(span:kind)",
    );
    prints_as(
        "{} | avg_over_time(duration)",
        "{ true } | avg_over_time(span:duration)",
    );
    prints_as(
        "{} | quantile_over_time(duration, .5, 0.99, 1)",
        "{ true } | quantile_over_time(span:duration, 0.5, 0.99, 1.0)",
    );
    prints_as(
        "{} | histogram_over_time(duration)",
        "{ true } | histogram_over_time(span:duration)",
    );
    prints_as(
        "{} | compare({status = error})",
        "{ true } | compare({ span:status = error }, 10)",
    );
    prints_as(
        "{} | compare({ }, 5, 10, 20)",
        "{ true } | compare({ true }, 5, 10, 20)",
    );
    prints_as(
        "{} | rate() by(name) | topk(3) > 1.5 | bottomk(2) <= -2 != 1s",
        "{ true } | rate() by(span:name) | topk(3) > 1.5 | bottomk(2) <= -2.0 != 1.0",
    );
    prints_as(
        "{ } | rate() with(sample=true, exemplars=5) with(most_recent=true)",
        "{ true } | rate() with(most_recent=true, sample=true, exemplars=5)",
    );
    prints_as(
        "{ } | by(name) | rate()",
        "{ true } | by(span:name) | rate()",
    );
    let q =
        parse("{ } | quantile_over_time(duration, 0.9) by(resource.service.name) | topk(2) > 3")
            .expect("parses");
    let m = q.metrics.clone().expect("a metrics query");
    assert_eq!(
        m.function,
        MetricsFn::QuantileOverTime(Attribute::Intrinsic(Intrinsic::Duration), vec![0.9])
    );
    assert_eq!(m.by, vec![attr(Scope::Resource, "service.name")]);
    assert_eq!(
        m.second,
        vec![SecondStage::TopK(2), SecondStage::Filter(CmpOp::Gt, 3.0)]
    );
    assert_eq!(q.hint("sample"), None);
    let q = parse("{ } | rate() with(sample=0.1) with(sample=true)").expect("parses");
    assert_eq!(q.hint("sample"), Some(&Static::Bool(true)));
}

#[test]
fn nested_set_intrinsics_are_ints() {
    prints_as("{ nestedSetParent < 0 }", "{ nestedSetParent < 0 }");
    prints_as(
        "{ nestedSetLeft > 1 && nestedSetRight = 4 }",
        "{ nestedSetLeft > 1 && nestedSetRight = 4 }",
    );
    refused_at("{ nestedSetLeft = \"a\" }", 19, "int and string");
}

#[test]
fn bad_arguments_are_refused_where_they_are() {
    refused_at(
        "{ } | quantile_over_time(duration, 1.5)",
        36,
        "outside [0, 1]",
    );
    refused_at("{ } | quantile_over_time(duration)", 34, "quantiles");
    refused_at("{ } | max_over_time(name)", 21, "needs a numeric field");
    refused_at("{ } | rate() | topk(0)", 21, "from 1 to 10000");
    refused_at("{ } | rate() | topk(100000)", 21, "from 1 to 10000");
    refused_at("{ } | rate() | count() > 1", 16, "topk(n) or bottomk(n)");
    refused_at("{ } | rate() > \"a\"", 16, "a number or a duration");
    refused_at("{ } | compare({ }) by(name)", 20, "the end of compare");
    refused_at("{ } | compare(name = \"a\")", 15, "spanset filter");
    refused_at("{ } | rate(duration)", 12, "\")\"");
    refused_at("{ } | rate() with(sample=2)", 26, "sample takes");
    refused_at("{ } | rate() with(exemplars=0.5)", 29, "exemplars takes");
    refused_at(
        "{ } | rate() with(job_size=1)",
        19,
        "not supported by tracedb",
    );
    let many: Vec<String> = (0..=crate::MAX_QUANTILES)
        .map(|i| format!("0.{i}"))
        .collect();
    let q = format!("{{ }} | quantile_over_time(duration, {})", many.join(", "));
    assert!(parse(&q).is_err());
}
