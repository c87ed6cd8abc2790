//! Random traces and random queries from the grammar, for model tests: the
//! queries name the services, span names and attributes the traces use, so
//! most of them match some traces and miss others. Deterministic for a seed.

use prost::Message as _;
use tracedb_proto::{
    common::v1::{any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue},
    resource::v1::Resource,
    trace::v1::{self as otlp, span, status},
};

use crate::ast::{
    Aggregate, ArithOp, Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Kind, Pipeline, Query,
    Relation, ScalarExpr, ScalarFilter, Scope, SpansetExpr, SpansetOp, Stage, Static, Status,
    Structure, UnaryOp,
};

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

pub const SERVICES: &[&str] = &["front", "cart", "pay", "db"];
pub const NAMES: &[&str] = &["GET /", "POST /pay", "query", "render", "charge"];
const WORDS: &[&str] = &["x", "y", "zz", "x y"];
const REGIONS: &[&str] = &["eu", "us"];
const SCOPES: &[&str] = &["lib-a", "lib-b"];
const MS: u64 = 1_000_000;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn text(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.to_owned())
}

/// One stored span's encoded parts: (resource, scope, span).
pub type EncodedParts = (Vec<u8>, Vec<u8>, Vec<u8>);

/// A random trace of 1 to 8 spans starting at `start` (Unix ns), each span
/// encoded as stored; sometimes without its root, sometimes with a parent
/// link that loops.
pub fn trace(rng: &mut Rng, trace_id: [u8; 16], start: u64) -> Vec<EncodedParts> {
    let n = 1 + rng.below(8);
    let drop_root = rng.chance(10);
    let mut out = Vec::new();
    for i in 0..n {
        let span_id = [(i as u8) + 1, trace_id[15], trace_id[14], 0, 0, 0, 0, 7];
        let parent = if i == 0 {
            if rng.chance(3) {
                vec![n as u8, trace_id[15], trace_id[14], 0, 0, 0, 0, 7]
            } else {
                Vec::new()
            }
        } else {
            let p = rng.below(i);
            vec![(p as u8) + 1, trace_id[15], trace_id[14], 0, 0, 0, 0, 7]
        };
        if i == 0 && drop_root {
            continue;
        }
        let begin = start + (i as u64) * rng.below(20) as u64 * MS;
        let mut attributes = Vec::new();
        if rng.chance(70) {
            attributes.push(kv("a", any_value::Value::IntValue(rng.below(5) as i64)));
        }
        if rng.chance(50) {
            attributes.push(kv("b", text(rng.pick::<&str>(WORDS))));
        }
        if rng.chance(30) {
            attributes.push(kv("c", any_value::Value::BoolValue(rng.chance(50))));
        }
        if rng.chance(30) {
            attributes.push(kv(
                "f",
                any_value::Value::DoubleValue(rng.below(8) as f64 / 2.0),
            ));
        }
        if rng.chance(15) {
            let values = (0..rng.below(3))
                .map(|_| AnyValue {
                    value: Some(text(rng.pick::<&str>(WORDS))),
                })
                .collect();
            attributes.push(kv(
                "arr",
                any_value::Value::ArrayValue(ArrayValue { values }),
            ));
        }
        if rng.chance(10) {
            attributes.push(kv("region", text(rng.pick::<&str>(REGIONS))));
        }
        let events = (0..rng.below(3))
            .map(|e| otlp::span::Event {
                time_unix_nano: begin + e as u64 * MS,
                name: (*rng.pick(&["exception", "retry"])).to_owned(),
                attributes: vec![kv("e", any_value::Value::IntValue(rng.below(3) as i64))],
                dropped_attributes_count: 0,
            })
            .collect();
        let links = (0..usize::from(rng.chance(15)))
            .map(|_| otlp::span::Link {
                trace_id: vec![9; 16].into(),
                span_id: vec![9; 8].into(),
                attributes: vec![kv("l", text(rng.pick::<&str>(WORDS)))],
                ..Default::default()
            })
            .collect();
        let code = *rng.pick(&[0, 0, 1, 2]);
        let span = otlp::Span {
            trace_id: trace_id.to_vec().into(),
            span_id: span_id.to_vec().into(),
            parent_span_id: parent.into(),
            name: (*rng.pick(NAMES)).to_owned(),
            kind: rng.below(6) as i32,
            start_time_unix_nano: begin,
            end_time_unix_nano: begin + (1 + rng.below(300) as u64) * MS,
            attributes,
            events,
            links,
            status: Some(otlp::Status {
                message: if code == 2 {
                    "boom".to_owned()
                } else {
                    String::new()
                },
                code: match code {
                    1 => status::StatusCode::Ok as i32,
                    2 => status::StatusCode::Error as i32,
                    _ => status::StatusCode::Unset as i32,
                },
            }),
            ..Default::default()
        };
        let _ = span::SpanKind::Server;
        let mut resource_attrs = vec![kv("service.name", text(rng.pick::<&str>(SERVICES)))];
        if rng.chance(50) {
            resource_attrs.push(kv("region", text(rng.pick::<&str>(REGIONS))));
        }
        let resource = Resource {
            attributes: resource_attrs,
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: (*rng.pick(SCOPES)).to_owned(),
            version: "1.0".to_owned(),
            ..Default::default()
        };
        out.push((
            resource.encode_to_vec(),
            scope.encode_to_vec(),
            span.encode_to_vec(),
        ));
    }
    out
}

fn attr(scope: Scope, name: &str) -> FieldExpr {
    FieldExpr::Attribute(Attribute::Attr {
        scope,
        name: name.to_owned(),
    })
}

fn intrinsic(x: Intrinsic) -> FieldExpr {
    FieldExpr::Attribute(Attribute::Intrinsic(x))
}

fn cmp(op: CmpOp, lhs: FieldExpr, rhs: Static) -> FieldExpr {
    FieldExpr::Binary {
        op: BinaryOp::Cmp(op),
        lhs: Box::new(lhs),
        rhs: Box::new(FieldExpr::Static(rhs)),
    }
}

fn any_cmp(rng: &mut Rng) -> CmpOp {
    *rng.pick(&[
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Lt,
        CmpOp::Le,
    ])
}

/// One condition on a span.
fn condition(rng: &mut Rng) -> FieldExpr {
    let eq_ne = |rng: &mut Rng| *rng.pick(&[CmpOp::Eq, CmpOp::Ne]);
    match rng.below(16) {
        0 => cmp(
            CmpOp::Eq,
            attr(Scope::Resource, "service.name"),
            Static::Str((*rng.pick(SERVICES)).to_owned()),
        ),
        1 => cmp(
            eq_ne(rng),
            intrinsic(Intrinsic::Name),
            Static::Str((*rng.pick(NAMES)).to_owned()),
        ),
        2 => cmp(
            eq_ne(rng),
            intrinsic(Intrinsic::Status),
            Static::Status(*rng.pick(&[Status::Error, Status::Ok, Status::Unset])),
        ),
        3 => cmp(
            eq_ne(rng),
            intrinsic(Intrinsic::Kind),
            Static::Kind(*rng.pick(&[
                Kind::Server,
                Kind::Client,
                Kind::Internal,
                Kind::Unspecified,
            ])),
        ),
        4 => cmp(
            any_cmp(rng),
            intrinsic(Intrinsic::Duration),
            Static::Duration((rng.below(300) as i64) * MS as i64),
        ),
        5 => {
            let n = rng.below(5);
            let literal = if rng.chance(20) {
                Static::Float(n as f64)
            } else {
                Static::Int(n as i64)
            };
            cmp(any_cmp(rng), attr(Scope::Span, "a"), literal)
        }
        6 => cmp(
            any_cmp(rng),
            rng.pick(&[attr(Scope::Unscoped, "f"), attr(Scope::Span, "f")])
                .clone(),
            Static::Float(rng.below(8) as f64 / 2.0),
        ),
        7 => cmp(
            eq_ne(rng),
            attr(Scope::Span, "b"),
            Static::Str((*rng.pick(WORDS)).to_owned()),
        ),
        8 => cmp(
            *rng.pick(&[CmpOp::Match, CmpOp::NotMatch]),
            attr(Scope::Span, "b"),
            Static::Str((*rng.pick(&["x.*", "z+", "x"])).to_owned()),
        ),
        9 => cmp(
            eq_ne(rng),
            attr(Scope::Span, "c"),
            Static::Bool(rng.chance(50)),
        ),
        10 => cmp(
            eq_ne(rng),
            attr(Scope::Span, "arr"),
            Static::Str((*rng.pick(WORDS)).to_owned()),
        ),
        11 => cmp(
            eq_ne(rng),
            rng.pick(&[
                attr(Scope::Unscoped, "region"),
                attr(Scope::Resource, "region"),
            ])
            .clone(),
            Static::Str((*rng.pick(REGIONS)).to_owned()),
        ),
        12 => cmp(
            eq_ne(rng),
            attr(Scope::Event, "e"),
            Static::Int(rng.below(3) as i64),
        ),
        13 => cmp(
            eq_ne(rng),
            rng.pick(&[
                attr(Scope::Span, "a"),
                attr(Scope::Span, "c"),
                attr(Scope::Link, "l"),
            ])
            .clone(),
            Static::Nil,
        ),
        14 => cmp(
            eq_ne(rng),
            intrinsic(*rng.pick(&[Intrinsic::RootServiceName, Intrinsic::InstrumentationName])),
            Static::Str((*rng.pick(&["front", "cart", "lib-a"])).to_owned()),
        ),
        _ => FieldExpr::Binary {
            op: BinaryOp::Cmp(any_cmp(rng)),
            lhs: Box::new(FieldExpr::Binary {
                op: BinaryOp::Arith(*rng.pick(&[ArithOp::Add, ArithOp::Mul, ArithOp::Sub])),
                lhs: Box::new(attr(Scope::Span, "a")),
                rhs: Box::new(FieldExpr::Static(Static::Int(rng.below(3) as i64))),
            }),
            rhs: Box::new(FieldExpr::Static(Static::Int(rng.below(8) as i64))),
        },
    }
}

/// A field expression of up to `depth` levels of `&&`, `||` and `!`.
fn field_expr(rng: &mut Rng, depth: usize) -> FieldExpr {
    if depth == 0 || rng.chance(45) {
        return condition(rng);
    }
    match rng.below(5) {
        0 => FieldExpr::Unary(UnaryOp::Not, Box::new(field_expr(rng, depth - 1))),
        1 | 2 => FieldExpr::Binary {
            op: BinaryOp::Or,
            lhs: Box::new(field_expr(rng, depth - 1)),
            rhs: Box::new(field_expr(rng, depth - 1)),
        },
        _ => FieldExpr::Binary {
            op: BinaryOp::And,
            lhs: Box::new(field_expr(rng, depth - 1)),
            rhs: Box::new(field_expr(rng, depth - 1)),
        },
    }
}

fn filter(rng: &mut Rng) -> SpansetExpr {
    if rng.chance(10) {
        return SpansetExpr::Filter(FieldExpr::Static(Static::Bool(true)));
    }
    SpansetExpr::Filter(field_expr(rng, 2))
}

fn spansets(rng: &mut Rng, depth: usize) -> SpansetExpr {
    if depth == 0 || rng.chance(40) {
        return filter(rng);
    }
    let relation = *rng.pick(&[
        Relation::Child,
        Relation::Descendant,
        Relation::Parent,
        Relation::Ancestor,
        Relation::Sibling,
    ]);
    let structure = *rng.pick(&[Structure::Plain, Structure::Not, Structure::Union]);
    let op = match rng.below(4) {
        0 => SpansetOp::And,
        1 => SpansetOp::Or,
        _ => SpansetOp::Structural(relation, structure),
    };
    SpansetExpr::Binary {
        op,
        lhs: Box::new(spansets(rng, depth - 1)),
        rhs: Box::new(spansets(rng, depth - 1)),
    }
}

/// A random query: a spanset expression, then sometimes more stages.
pub fn query(rng: &mut Rng) -> Query {
    let mut stages = vec![Stage::Spansets(spansets(rng, 2))];
    for _ in 0..rng.below(3) {
        let stage = match rng.below(6) {
            0 => Stage::Spansets(filter(rng)),
            1 => Stage::ScalarFilter(ScalarFilter {
                op: any_cmp(rng),
                lhs: ScalarExpr::Count,
                rhs: ScalarExpr::Static(Static::Int(rng.below(4) as i64)),
            }),
            2 => Stage::ScalarFilter(ScalarFilter {
                op: any_cmp(rng),
                lhs: ScalarExpr::Aggregate(
                    *rng.pick(&[
                        Aggregate::Avg,
                        Aggregate::Min,
                        Aggregate::Max,
                        Aggregate::Sum,
                    ]),
                    intrinsic(Intrinsic::Duration),
                ),
                rhs: ScalarExpr::Static(Static::Duration((rng.below(300) as i64) * MS as i64)),
            }),
            3 => Stage::By(
                rng.pick(&[
                    attr(Scope::Resource, "service.name"),
                    intrinsic(Intrinsic::Name),
                    attr(Scope::Span, "b"),
                ])
                .clone(),
            ),
            4 => Stage::Coalesce,
            _ => Stage::Select(vec![attr(Scope::Span, "a")]),
        };
        stages.push(stage);
    }
    Query {
        pipeline: Pipeline { stages },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    }
}
