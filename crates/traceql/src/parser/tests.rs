use super::*;
use crate::ast::{
    ArithOp, Attribute, BinaryOp, FieldExpr, Intrinsic, Kind, Scope, Status, UnaryOp,
};

// ---- tree builders ----

fn a(scope: Scope, name: &str) -> FieldExpr {
    FieldExpr::Attribute(Attribute::Attr {
        scope,
        name: name.to_string(),
    })
}

fn dot(name: &str) -> FieldExpr {
    a(Scope::Unscoped, name)
}

fn intr(i: Intrinsic) -> FieldExpr {
    FieldExpr::Attribute(Attribute::Intrinsic(i))
}

fn lit(s: Static) -> FieldExpr {
    FieldExpr::Static(s)
}

fn int(i: i64) -> FieldExpr {
    lit(Static::Int(i))
}

fn string(s: &str) -> FieldExpr {
    lit(Static::Str(s.to_string()))
}

fn bin(op: BinaryOp, lhs: FieldExpr, rhs: FieldExpr) -> FieldExpr {
    FieldExpr::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    }
}

fn cmp(op: CmpOp, lhs: FieldExpr, rhs: FieldExpr) -> FieldExpr {
    bin(BinaryOp::Cmp(op), lhs, rhs)
}

fn eq(lhs: FieldExpr, rhs: FieldExpr) -> FieldExpr {
    cmp(CmpOp::Eq, lhs, rhs)
}

fn arith(op: ArithOp, lhs: FieldExpr, rhs: FieldExpr) -> FieldExpr {
    bin(BinaryOp::Arith(op), lhs, rhs)
}

fn filter(e: FieldExpr) -> SpansetExpr {
    SpansetExpr::Filter(e)
}

fn sets(op: SpansetOp, lhs: SpansetExpr, rhs: SpansetExpr) -> SpansetExpr {
    SpansetExpr::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    }
}

fn structural(r: Relation, s: Structure) -> SpansetOp {
    SpansetOp::Structural(r, s)
}

fn query(stages: Vec<Stage>) -> Query {
    Query {
        pipeline: Pipeline { stages },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    }
}

fn one(e: SpansetExpr) -> Query {
    query(vec![Stage::Spansets(e)])
}

/// `{ e }` alone.
fn f(e: FieldExpr) -> Query {
    one(filter(e))
}

fn scalar(op: CmpOp, lhs: ScalarExpr, rhs: ScalarExpr) -> Stage {
    Stage::ScalarFilter(ScalarFilter { op, lhs, rhs })
}

fn num(s: Static) -> ScalarExpr {
    ScalarExpr::Static(s)
}

fn all() -> SpansetExpr {
    filter(lit(Static::Bool(true)))
}

#[track_caller]
fn parses(text: &str, want: Query) {
    match parse(text) {
        Ok(got) => {
            assert_eq!(got, want, "{text}");
            round_trips(&got);
        }
        Err(e) => panic!("{text}: {e}"),
    }
}

#[track_caller]
fn round_trips(q: &Query) {
    let printed = q.to_string();
    match parse(&printed) {
        Ok(back) => assert_eq!(&back, q, "printed as {printed}"),
        Err(e) => panic!("printed as {printed}, which does not parse: {e}"),
    }
}

/// The error of `text`, as (line, column, message).
#[track_caller]
fn refused(text: &str) -> (usize, usize, String) {
    match parse(text) {
        Ok(q) => panic!("{text} parsed as {q:?}"),
        Err(e) => (e.line, e.column, e.message),
    }
}

#[track_caller]
fn refused_at(text: &str, line: usize, column: usize, needle: &str) {
    let (l, c, m) = refused(text);
    assert_eq!((l, c), (line, column), "{text}: {m}");
    assert!(m.contains(needle), "{text}: {m:?} lacks {needle:?}");
}

// ---- what parses ----

#[test]
fn every_intrinsic() {
    use Intrinsic::*;
    let cases = [
        ("name", Name),
        ("status", Status),
        ("statusMessage", StatusMessage),
        ("kind", Kind),
        ("duration", Duration),
        ("rootName", RootName),
        ("rootServiceName", RootServiceName),
        ("traceDuration", TraceDuration),
        ("span:name", Name),
        ("span:status", Status),
        ("span:statusMessage", StatusMessage),
        ("span:kind", Kind),
        ("span:duration", Duration),
        ("span:id", SpanId),
        ("span:parentID", ParentId),
        ("span:childCount", ChildCount),
        ("trace:id", TraceId),
        ("trace:rootName", RootName),
        ("trace:rootService", RootServiceName),
        ("trace:duration", TraceDuration),
        ("event:name", EventName),
        ("event:timeSinceStart", EventTimeSinceStart),
        ("link:traceID", LinkTraceId),
        ("link:spanID", LinkSpanId),
        ("instrumentation:name", InstrumentationName),
        ("instrumentation:version", InstrumentationVersion),
    ];
    for (text, i) in cases {
        let q = format!("{{ {text} != nil }}");
        parses(&q, f(cmp(CmpOp::Ne, intr(i), lit(Static::Nil))));
    }
}

#[test]
fn typed_intrinsic_comparisons() {
    parses(
        "{ status = error && kind = server && duration > 1.5s && span:childCount >= 2 }",
        f(bin(
            BinaryOp::And,
            bin(
                BinaryOp::And,
                bin(
                    BinaryOp::And,
                    eq(intr(Intrinsic::Status), lit(Static::Status(Status::Error))),
                    eq(intr(Intrinsic::Kind), lit(Static::Kind(Kind::Server))),
                ),
                cmp(
                    CmpOp::Gt,
                    intr(Intrinsic::Duration),
                    lit(Static::Duration(1_500_000_000)),
                ),
            ),
            cmp(CmpOp::Ge, intr(Intrinsic::ChildCount), int(2)),
        )),
    );
}

#[test]
fn scopes_and_quoted_names() {
    parses(
        "{ span.http.status_code = 200 }",
        f(eq(a(Scope::Span, "http.status_code"), int(200))),
    );
    parses(
        r#"{ resource.k8s.pod.name = "p" }"#,
        f(eq(a(Scope::Resource, "k8s.pod.name"), string("p"))),
    );
    parses(
        "{ event.e = 1 && link.l = 2 && instrumentation.i = 3 && .u = 4 }",
        f(bin(
            BinaryOp::And,
            bin(
                BinaryOp::And,
                bin(
                    BinaryOp::And,
                    eq(a(Scope::Event, "e"), int(1)),
                    eq(a(Scope::Link, "l"), int(2)),
                ),
                eq(a(Scope::Instrumentation, "i"), int(3)),
            ),
            eq(dot("u"), int(4)),
        )),
    );
    parses(
        r#"{ span."my attr" = 1 || ."a b" = 2 || resource."x.y" = 3 || ."5xx" = 4 }"#,
        f(bin(
            BinaryOp::Or,
            bin(
                BinaryOp::Or,
                bin(
                    BinaryOp::Or,
                    eq(a(Scope::Span, "my attr"), int(1)),
                    eq(dot("a b"), int(2)),
                ),
                eq(a(Scope::Resource, "x.y"), int(3)),
            ),
            eq(dot("5xx"), int(4)),
        )),
    );
    // `.name` is an attribute called "name", not the intrinsic.
    parses(r#"{ .name = "x" }"#, f(eq(dot("name"), string("x"))));
    // `.a+1` is one name, as in Tempo.
    parses("{ .a+1 = 2 }", f(eq(dot("a+1"), int(2))));
}

#[test]
fn literals() {
    parses("{}", one(all()));
    parses("{ true }", one(all()));
    parses(
        r#"{ .a = "q\"\\\n\t" || .a = `raw\n` }"#,
        f(bin(
            BinaryOp::Or,
            eq(dot("a"), string("q\"\\\n\t")),
            eq(dot("a"), string("raw\\n")),
        )),
    );
    parses(
        "{ .a = -1 && .b = -2.5 && .c = 1.0 && .d = 3us }",
        f(bin(
            BinaryOp::And,
            bin(
                BinaryOp::And,
                bin(
                    BinaryOp::And,
                    eq(dot("a"), int(-1)),
                    eq(dot("b"), lit(Static::Float(-2.5))),
                ),
                eq(dot("c"), lit(Static::Float(1.0))),
            ),
            eq(dot("d"), lit(Static::Duration(3_000))),
        )),
    );
    parses(
        "{ .a = maxInt || .a = minInt || .b = false || .c = unset || .d = consumer }",
        f(bin(
            BinaryOp::Or,
            bin(
                BinaryOp::Or,
                bin(
                    BinaryOp::Or,
                    bin(
                        BinaryOp::Or,
                        eq(dot("a"), int(i64::MAX)),
                        eq(dot("a"), int(i64::MIN)),
                    ),
                    eq(dot("b"), lit(Static::Bool(false))),
                ),
                eq(dot("c"), lit(Static::Status(Status::Unset))),
            ),
            eq(dot("d"), lit(Static::Kind(Kind::Consumer))),
        )),
    );
    parses("{ .a = nil }", f(eq(dot("a"), lit(Static::Nil))));
    parses(
        "{ nil != .a }",
        f(cmp(CmpOp::Ne, lit(Static::Nil), dot("a"))),
    );
}

#[test]
fn every_field_operator() {
    use CmpOp::*;
    for (text, op) in [
        ("=", Eq),
        ("!=", Ne),
        (">", Gt),
        (">=", Ge),
        ("<", Lt),
        ("<=", Le),
        ("=~", Match),
        ("!~", NotMatch),
    ] {
        parses(
            &format!("{{ .a {text} \"x\" }}"),
            f(cmp(op, dot("a"), string("x"))),
        );
    }
    use ArithOp::*;
    for (text, op) in [
        ("+", Add),
        ("-", Sub),
        ("*", Mul),
        ("/", Div),
        ("%", Mod),
        ("^", Pow),
    ] {
        parses(
            &format!("{{ .a {text} 2 = 3 }}"),
            f(eq(arith(op, dot("a"), int(2)), int(3))),
        );
    }
    parses(
        "{ !.a && -.b > 1 }",
        f(bin(
            BinaryOp::And,
            FieldExpr::Unary(UnaryOp::Not, Box::new(dot("a"))),
            cmp(
                CmpOp::Gt,
                FieldExpr::Unary(UnaryOp::Neg, Box::new(dot("b"))),
                int(1),
            ),
        )),
    );
}

#[test]
fn field_precedence() {
    // `&&` and `||` are one level, left to right, as in Tempo.
    parses(
        "{ .a = 1 || .b = 2 && .c = 3 }",
        f(bin(
            BinaryOp::And,
            bin(BinaryOp::Or, eq(dot("a"), int(1)), eq(dot("b"), int(2))),
            eq(dot("c"), int(3)),
        )),
    );
    parses(
        "{ .a = 1 || (.b = 2 && .c = 3) }",
        f(bin(
            BinaryOp::Or,
            eq(dot("a"), int(1)),
            bin(BinaryOp::And, eq(dot("b"), int(2)), eq(dot("c"), int(3))),
        )),
    );
    parses(
        "{ .a + 1 * 2 = 3 }",
        f(eq(
            arith(ArithOp::Add, dot("a"), arith(ArithOp::Mul, int(1), int(2))),
            int(3),
        )),
    );
    parses(
        "{ .a - 1 - 2 = .b ^ 2 ^ 3 }",
        f(eq(
            arith(ArithOp::Sub, arith(ArithOp::Sub, dot("a"), int(1)), int(2)),
            arith(ArithOp::Pow, dot("b"), arith(ArithOp::Pow, int(2), int(3))),
        )),
    );
    // Prefix `-` sits between `+` and `*`: `-a * b` is `-(a * b)`.
    parses(
        "{ -.a * .b + .c = 1 }",
        f(eq(
            arith(
                ArithOp::Add,
                FieldExpr::Unary(
                    UnaryOp::Neg,
                    Box::new(arith(ArithOp::Mul, dot("a"), dot("b"))),
                ),
                dot("c"),
            ),
            int(1),
        )),
    );
    parses(
        "{ (.a + 1) * 2 = 4 }",
        f(eq(
            arith(ArithOp::Mul, arith(ArithOp::Add, dot("a"), int(1)), int(2)),
            int(4),
        )),
    );
    parses(
        "{ (-2) ^ 2 = .a }",
        f(eq(arith(ArithOp::Pow, int(-2), int(2)), dot("a"))),
    );
}

#[test]
fn every_spanset_operator() {
    use Relation::*;
    use Structure::*;
    for (text, op) in [
        ("&&", SpansetOp::And),
        ("||", SpansetOp::Or),
        (">", structural(Child, Plain)),
        (">>", structural(Descendant, Plain)),
        ("<", structural(Parent, Plain)),
        ("<<", structural(Ancestor, Plain)),
        ("~", structural(Sibling, Plain)),
        ("!>", structural(Child, Not)),
        ("!>>", structural(Descendant, Not)),
        ("!<", structural(Parent, Not)),
        ("!<<", structural(Ancestor, Not)),
        ("!~", structural(Sibling, Not)),
        ("&>", structural(Child, Union)),
        ("&>>", structural(Descendant, Union)),
        ("&<", structural(Parent, Union)),
        ("&<<", structural(Ancestor, Union)),
        ("&~", structural(Sibling, Union)),
    ] {
        parses(
            &format!("{{ .a }} {text} {{ .b }}"),
            one(sets(op, filter(dot("a")), filter(dot("b")))),
        );
    }
}

#[test]
fn spanset_precedence() {
    let desc = structural(Relation::Descendant, Structure::Plain);
    parses(
        "{ .a } >> { .b } && { .c }",
        one(sets(
            SpansetOp::And,
            sets(desc, filter(dot("a")), filter(dot("b"))),
            filter(dot("c")),
        )),
    );
    parses(
        "{ .a } && { .b } >> { .c }",
        one(sets(
            SpansetOp::And,
            filter(dot("a")),
            sets(desc, filter(dot("b")), filter(dot("c"))),
        )),
    );
    parses(
        "({ .a } && { .b }) >> { .c }",
        one(sets(
            desc,
            sets(SpansetOp::And, filter(dot("a")), filter(dot("b"))),
            filter(dot("c")),
        )),
    );
    // `>` and `!~` mean "child" and "not sibling" between spansets and
    // "greater" and "does not match" inside them.
    parses(
        r#"{ .a > 1 } > { .b !~ "x" } !~ { }"#,
        one(sets(
            structural(Relation::Sibling, Structure::Not),
            sets(
                structural(Relation::Child, Structure::Plain),
                filter(cmp(CmpOp::Gt, dot("a"), int(1))),
                filter(cmp(CmpOp::NotMatch, dot("b"), string("x"))),
            ),
            all(),
        )),
    );
}

#[test]
fn pipelines() {
    parses(
        "{ } | count() > 2",
        query(vec![
            Stage::Spansets(all()),
            scalar(CmpOp::Gt, ScalarExpr::Count, num(Static::Int(2))),
        ]),
    );
    parses(
        "{ .a } | avg(duration) > 1s | by(resource.service.name) | select(span.x, name, trace:id) | coalesce()",
        query(vec![
            Stage::Spansets(filter(dot("a"))),
            scalar(
                CmpOp::Gt,
                ScalarExpr::Aggregate(Aggregate::Avg, intr(Intrinsic::Duration)),
                num(Static::Duration(1_000_000_000)),
            ),
            Stage::By(a(Scope::Resource, "service.name")),
            Stage::Select(vec![
                a(Scope::Span, "x"),
                intr(Intrinsic::Name),
                intr(Intrinsic::TraceId),
            ]),
            Stage::Coalesce,
        ]),
    );
    parses(
        "{ } | max(span.x) - min(span.x) > 3",
        query(vec![
            Stage::Spansets(all()),
            scalar(
                CmpOp::Gt,
                ScalarExpr::Arith {
                    op: ArithOp::Sub,
                    lhs: Box::new(ScalarExpr::Aggregate(Aggregate::Max, a(Scope::Span, "x"))),
                    rhs: Box::new(ScalarExpr::Aggregate(Aggregate::Min, a(Scope::Span, "x"))),
                },
                num(Static::Int(3)),
            ),
        ]),
    );
    parses(
        "{ } | -2.5 <= sum(.x) * 2",
        query(vec![
            Stage::Spansets(all()),
            scalar(
                CmpOp::Le,
                num(Static::Float(-2.5)),
                ScalarExpr::Arith {
                    op: ArithOp::Mul,
                    lhs: Box::new(ScalarExpr::Aggregate(Aggregate::Sum, dot("x"))),
                    rhs: Box::new(num(Static::Int(2))),
                },
            ),
        ]),
    );
    parses(
        "{ } | (count() + 1) != 3 | { .b }",
        query(vec![
            Stage::Spansets(all()),
            scalar(
                CmpOp::Ne,
                ScalarExpr::Arith {
                    op: ArithOp::Add,
                    lhs: Box::new(ScalarExpr::Count),
                    rhs: Box::new(num(Static::Int(1))),
                },
                num(Static::Int(3)),
            ),
            Stage::Spansets(filter(dot("b"))),
        ]),
    );
    // A later stage may start with parentheses around spansets.
    parses(
        "{ } | ({ .a } || { .b })",
        query(vec![
            Stage::Spansets(all()),
            Stage::Spansets(sets(SpansetOp::Or, filter(dot("a")), filter(dot("b")))),
        ]),
    );
}

#[test]
fn parenthesized_pipelines() {
    let inner = |attr: &str| Pipeline {
        stages: vec![
            Stage::Spansets(filter(dot(attr))),
            scalar(CmpOp::Gt, ScalarExpr::Count, num(Static::Int(1))),
        ],
    };
    parses(
        "({ .a } | count() > 1) && ({ .b } | count() > 1)",
        one(sets(
            SpansetOp::And,
            SpansetExpr::Pipeline(Box::new(inner("a"))),
            SpansetExpr::Pipeline(Box::new(inner("b"))),
        )),
    );
    // A pipeline of one spanset stage is just that expression.
    parses(
        "({ .a } | count() > 1) > ({ .b })",
        one(sets(
            structural(Relation::Child, Structure::Plain),
            SpansetExpr::Pipeline(Box::new(inner("a"))),
            filter(dot("b")),
        )),
    );
    parses("(({ .a }))", one(filter(dot("a"))));
    parses(
        "({ .a } | count() > 1)",
        one(SpansetExpr::Pipeline(Box::new(inner("a")))),
    );
}

#[test]
fn with_hints() {
    let mut want = one(all());
    want.most_recent = true;
    parses("{ } with(most_recent=true)", want.clone());
    parses(
        "{ } with (most_recent = false) with(most_recent=true)",
        want,
    );
    parses("{ } with(most_recent=false)", one(all()));
    refused_at(
        "{ } with(job_size=1)",
        1,
        10,
        "\"job_size\" is not supported",
    );
    refused_at("{ } with(most_recent=1)", 1, 22, "true or false");
}

#[test]
fn whitespace_and_comments() {
    parses(
        "{\n  .a = 1 // the first\n  && /* and */ span:name = \"x\"\n}",
        f(bin(
            BinaryOp::And,
            eq(dot("a"), int(1)),
            eq(intr(Intrinsic::Name), string("x")),
        )),
    );
}

// ---- what is refused, and where ----

#[test]
fn syntax_errors_point_at_the_token() {
    refused_at(
        "{ status = }",
        1,
        12,
        r#"expected a value, an attribute or an intrinsic after "=", found "}""#,
    );
    refused_at("{ name = cart }", 1, 10, r#"found "cart""#);
    refused_at(
        "{ .a = 1",
        1,
        9,
        r#"expected "}" to close the "{" at column 1, found the end of the query"#,
    );
    refused_at(
        "{ .a = 1\n  && .b = 2\n",
        3,
        1,
        r#""}" to close the "{" at line 1, column 1"#,
    );
    refused_at("{ .a = 1 } }", 1, 12, "found \"}\"");
    refused_at("{ .a } >", 1, 9, "expected a spanset filter");
    refused_at("{ .a } = { .b }", 1, 8, "found \"=\"");
    refused_at("{ .a >> 1 }", 1, 6, "found \">>\"");
    refused_at("{ childCount = 1 }", 1, 3, "found \"childCount\"");
    refused_at("{ span:nope = 1 }", 1, 8, "an intrinsic of \"span:\"");
    refused_at("{ } | count(.a) > 1", 1, 13, "count takes no argument");
    refused_at("{ } | count()", 1, 14, "expected a comparison");
    refused_at("{ } | nope()", 1, 7, "found \"nope\"");
    refused_at("", 1, 1, "expected a spanset filter");
    refused_at("{ .a = \"open }", 1, 8, "string is not closed");
    refused_at(
        "{ .a = 1 } && { .b = 1 & }",
        1,
        24,
        "unexpected character '&'",
    );
}

#[test]
fn type_errors_point_at_the_operand() {
    refused_at(
        r#"{ status = "error" }"#,
        1,
        12,
        "different types: status and string",
    );
    refused_at(
        "{ status = server }",
        1,
        12,
        "different types: status and kind",
    );
    refused_at("{ kind = error }", 1, 10, "different types");
    refused_at(
        r#"{ duration = "x" }"#,
        1,
        14,
        "different types: duration and string",
    );
    refused_at(r#"{ "a" = 1 }"#, 1, 9, "different types: string and int");
    refused_at("{ 1 }", 1, 3, "needs a condition");
    refused_at(r#"{ "a" }"#, 1, 3, "needs a condition");
    refused_at("{ .a + 1 }", 1, 3, "needs a condition");
    refused_at(
        "{ status > ok }",
        1,
        10,
        "\">\" does not apply to values of type status",
    );
    refused_at("{ .a =~ 1 }", 1, 6, "does not apply to values of type int");
    refused_at("{ .a =~ .b }", 1, 9, "must be a string literal");
    refused_at(
        r#"{ .a =~ "(" }"#,
        1,
        9,
        "invalid regular expression: unclosed group",
    );
    refused_at(
        r#"{ .a =~ "a{1000}{1000}" }"#,
        1,
        9,
        "invalid regular expression",
    );
    refused_at("{ !1 }", 1, 3, "\"!\" applies to a boolean");
    refused_at(r#"{ -"a" = 1 }"#, 1, 3, "\"-\" applies to a number");
    refused_at("{ .a > nil }", 1, 8, "nil can only be compared");
    refused_at("{ nil }", 1, 3, "nil can only be compared");
    refused_at("{ (nil) = .a }", 1, 4, "nil can only be compared");
    refused_at("{ name = nil }", 1, 3, "span:name is never nil");
    refused_at("{ resource.service.name = nil }", 1, 3, "never nil");
    refused_at("{ true && 1 }", 1, 11, "different types");
}

#[test]
fn pipeline_errors() {
    refused_at("count() > 1", 1, 1, "expected a spanset filter");
    refused_at("by(.a)", 1, 1, "expected a spanset filter");
    refused_at(
        r#"{ } | count() > "x""#,
        1,
        17,
        r#"after ">", found the string "x""#,
    );
    refused_at(
        "{ } | avg(name) > 1",
        1,
        11,
        "avg() needs a number, but its argument is of type string",
    );
    refused_at("{ } | avg(1) > 1", 1, 11, "needs a field of the span");
    refused_at("{ } | sum(.a) > \"x\"", 1, 17, "found");
    refused_at("{ } | count() > 1s + true", 1, 22, "found \"true\"");
    refused_at("{ } | 1 > 2", 1, 7, "compares an aggregate");
    refused_at("{ } | by(1)", 1, 10, "by() needs a field of the span");
    refused_at(
        "{ } | select(1)",
        1,
        14,
        "expected an attribute or an intrinsic",
    );
    refused_at("{ } | coalesce(.a)", 1, 16, "coalesce takes no argument");
    // Parenthesized pipelines: the whole query, every operand in parentheses.
    refused_at(
        "({ .a } | count() > 1) && { .b }",
        1,
        27,
        "must be in parentheses",
    );
    refused_at(
        "({ .a } | count() > 1) | by(.a)",
        1,
        1,
        "must be the whole query",
    );
    refused_at(
        "{ } | ({ .a } | count() > 1)",
        1,
        7,
        "must be the whole query",
    );
    refused_at("({ .a } | count()) > 1", 1, 18, "expected a comparison");
}

#[test]
fn unsupported_names_say_so() {
    refused_at("{ parent = nil }", 1, 3, "not supported by tracedb");
    refused_at("{ parent.x = 1 }", 1, 3, "not supported by tracedb");
}

// ---- hostile input ----

#[test]
fn long_queries_are_refused_up_front() {
    let q = format!("{{ .a = \"{}\" }}", "x".repeat(MAX_QUERY_BYTES));
    refused_at(&q, 1, 1, "at most 65536");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for q in [
        "(".repeat(100_000),
        format!("{}{{ }}", "(".repeat(100_000)),
        format!("{{ {}", "!".repeat(100_000)),
        format!("{{ {}", "(".repeat(100_000)),
        format!("{{ {}", "-".repeat(100_000)),
        format!("{{ }} | {}", "(".repeat(100_000)),
        format!("{{ }} | {}1", "(".repeat(100_000)),
        "{".repeat(100_000),
        "!".repeat(100_000),
    ] {
        let q = &q[..q.len().min(MAX_QUERY_BYTES)];
        // Refused, whether for depth, for its operators or because the
        // syntax fails first.
        let (_, _, message) = refused(q);
        assert!(
            message.contains("deeper than 64")
                || message.contains("operators")
                || message.contains("expected"),
            "{message}"
        );
    }
    let q = format!(
        "{}{{ }}{}",
        "(".repeat(MAX_DEPTH - 1),
        ")".repeat(MAX_DEPTH - 1)
    );
    assert!(parse(&q).is_ok());
    let q = format!("{}{{ }}{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    // The 64 parentheses are fine; the brace inside is one level too deep.
    refused_at(&q, 1, MAX_DEPTH + 1, "deeper than 64");
}

#[test]
fn long_operator_chains_parse_and_print() {
    // A chain as long as the operator limit makes a tree as deep; neither
    // the parser, the printer nor the checks recurse along it.
    let unit = "{ .a = 1 } && ";
    let n = MAX_OPERATORS / 2 - 1;
    let q = format!("{}{{ .a = 1 }}", unit.repeat(n));
    let parsed = parse(&q).expect("a long chain parses");
    round_trips(&parsed);

    let q = format!("{{ {}.a = 1 }}", ".a = 1 || ".repeat(MAX_OPERATORS / 2 - 1));
    round_trips(&parse(&q).expect("a long condition parses"));
    let q = format!("{{ .a = {}2 }}", "2 ^ ".repeat(MAX_OPERATORS - 1));
    round_trips(&parse(&q).expect("a long power chain parses"));
    let q = format!("{{ }} | count() > {}1", "1 + ".repeat(MAX_OPERATORS - 2));
    round_trips(&parse(&q).expect("a long scalar chain parses"));
}

#[test]
fn more_operators_than_the_limit_are_refused() {
    let q = format!("{{ .a = {}2 }}", "2 ^ ".repeat(MAX_OPERATORS));
    let err = parse(&q).expect_err("too many operators");
    assert!(err.message.contains("more than 1024 operators"), "{err}");
    let q = format!("{}{{ }}", "{ } && ".repeat(MAX_OPERATORS + 1));
    assert!(parse(&q).is_err());
}

#[test]
fn odd_input_never_panics() {
    let pieces = [
        "{", "}", "(", ")", ".a", "span:", "\"", "`", "=", "!", "-", "|", "&&", ">", "1", "1.5s",
        "nil", "count()", "by(", ",", "with(", "é", "\\", "/*", "µs", " ",
    ];
    // Every pair and triple of pieces.
    for x in pieces {
        for y in pieces {
            let _ = parse(&format!("{x}{y}"));
            for z in pieces {
                let _ = parse(&format!("{x}{y}{z}"));
                let _ = parse(&format!("{{ {x} {y} {z} }}"));
            }
        }
    }
}

// ---- printing ----

#[test]
fn printing_is_canonical() {
    for (text, printed) in [
        ("{}", "{ true }"),
        ("{ .a = 1 || (.b = 2 && .c = 3) }", "{ .a = 1 || (.b = 2 && .c = 3) }"),
        ("{ (.a = 1 || .b = 2) && .c = 3 }", "{ .a = 1 || .b = 2 && .c = 3 }"),
        ("{ .a + 1 * 2 = 3 }", "{ .a + 1 * 2 = 3 }"),
        ("{ (.a + 1) * 2 = 3 }", "{ (.a + 1) * 2 = 3 }"),
        ("{ (.a ^ 2) ^ 3 = 1 }", "{ (.a ^ 2) ^ 3 = 1 }"),
        ("{ .a ^ 2 ^ 3 = 1 }", "{ .a ^ 2 ^ 3 = 1 }"),
        ("{ (-2) ^ 2 = .a }", "{ (-2) ^ 2 = .a }"),
        ("{ -.a * .b = 1 }", "{ -(.a * .b) = 1 }"),
        ("{ .a * (-.b) * .c = 1 }", "{ .a * (-.b) * .c = 1 }"),
        ("{ span.duration > 1500ms }", "{ span.duration > 1500ms }"),
        ("{ duration > 1.5s }", "{ span:duration > 1500ms }"),
        ("{ duration > 90m }", "{ span:duration > 90m }"),
        ("{ duration > 1001ns }", "{ span:duration > 1001ns }"),
        ("{ .a = 1.0 }", "{ .a = 1.0 }"),
        ("{ .a = 1e-7 }", "{ .a = 1e-7 }"),
        ("{ .a = minInt }", "{ .a = minInt }"),
        (r#"{ ."a b" = "x\"\n" }"#, r#"{ ."a b" = "x\"\n" }"#),
        (r#"{ span."a" = 1 }"#, "{ span.a = 1 }"),
        (r#"{ ."1a" = 1 }"#, r#"{ ."1a" = 1 }"#),
        ("{ status = error }", "{ span:status = error }"),
        ("{ .a } >> ({ .b } || { .c })", "{ .a } >> ({ .b } || { .c })"),
        ("({ .a } >> { .b }) || { .c }", "{ .a } >> { .b } || { .c }"),
        (
            "({ .a } | count() > 1) && ({ .b })",
            "({ .a } | count() > 1) && ({ .b })",
        ),
        (
            "{ } | count() * (2 + 1) > -1 | by(.a) | select(.a, name) | coalesce() with(most_recent=true)",
            "{ true } | count() * (2 + 1) > -1 | by(.a) | select(.a, span:name) | coalesce() with(most_recent=true)",
        ),
    ] {
        let q = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(q.to_string(), printed, "{text}");
        round_trips(&q);
    }
}

#[test]
fn error_display() {
    let e = parse("{ status = }").err().map(|e| e.to_string());
    assert_eq!(
        e.as_deref(),
        Some(
            "parse error at line 1, column 12: expected a value, an attribute or an intrinsic \
             after \"=\", found \"}\""
        )
    );
}
