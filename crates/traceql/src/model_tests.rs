//! The evaluator against a plain reference on random traces and random
//! queries ([`crate::arbitrary`]): the reference applies each definition of
//! the language literally (sets of spans, every relation by walking every
//! pair of spans), with none of the evaluator's precomputed tables. They must
//! agree on every spanset of every trace.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    arbitrary::{self, Rng},
    ast::{
        Pipeline, Query, Relation, ScalarExpr, SpansetExpr, SpansetOp, Stage, Static, Structure,
    },
    eval::Compiled,
    trace::{EncodedSpan, Trace},
};

type Set = BTreeSet<usize>;

/// The spans a one-filter query keeps: the per-span truth of a field
/// expression, which both sides take from the evaluator (what the model
/// checks is everything built on it).
fn filter_truth(trace: &Trace, e: &crate::ast::FieldExpr) -> Set {
    let q = Query {
        pipeline: Pipeline {
            stages: vec![Stage::Spansets(SpansetExpr::Filter(e.clone()))],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    };
    Compiled::new(q)
        .expect("regexes compile")
        .eval(trace)
        .into_iter()
        .flat_map(|s| s.spans)
        .collect()
}

struct Reference<'a> {
    trace: &'a Trace,
}

impl Reference<'_> {
    /// The span whose ID the span's parent ID names (the first stored with it).
    fn parent(&self, i: usize) -> Option<usize> {
        let want = self.trace.spans[i].parent_id?;
        let p = self.trace.spans.iter().position(|s| s.span_id == want)?;
        (p != i).then_some(p)
    }

    /// Spans reached walking up from `i`, at most as many steps as spans.
    fn ancestors(&self, i: usize) -> Set {
        let mut out = Set::new();
        let mut at = self.parent(i);
        for _ in 0..=self.trace.spans.len() {
            let Some(p) = at else { break };
            out.insert(p);
            at = self.parent(p);
        }
        out
    }

    /// Whether `r` stands in `rel` to `l`: both in the tree (reached from a
    /// span without a parent ID), and related.
    fn in_tree(&self, i: usize) -> bool {
        let roots: Vec<usize> = (0..self.trace.spans.len())
            .filter(|&i| self.trace.spans[i].parent_id.is_none())
            .collect();
        roots.contains(&i) || roots.iter().any(|r| self.ancestors(i).contains(r))
    }

    fn holds(&self, rel: Relation, l: usize, r: usize) -> bool {
        if !self.in_tree(l) || !self.in_tree(r) {
            return false;
        }
        match rel {
            Relation::Child => self.parent(r) == Some(l),
            Relation::Parent => self.parent(l) == Some(r),
            Relation::Descendant => self.ancestors(r).contains(&l),
            Relation::Ancestor => self.ancestors(l).contains(&r),
            Relation::Sibling => {
                l != r && self.parent(l).is_some() && self.parent(l) == self.parent(r)
            }
        }
    }

    fn spansets(&self, e: &SpansetExpr, input: &Set) -> Set {
        match e {
            SpansetExpr::Filter(f) => filter_truth(self.trace, f)
                .intersection(input)
                .copied()
                .collect(),
            SpansetExpr::Pipeline(p) => self
                .pipeline(p, vec![(input.clone(), Vec::new())])
                .into_iter()
                .flat_map(|(s, _)| s)
                .collect(),
            SpansetExpr::Binary { op, lhs, rhs } => {
                let l = self.spansets(lhs, input);
                let r = self.spansets(rhs, input);
                match op {
                    SpansetOp::And => {
                        if l.is_empty() || r.is_empty() {
                            Set::new()
                        } else {
                            l.union(&r).copied().collect()
                        }
                    }
                    SpansetOp::Or => l.union(&r).copied().collect(),
                    SpansetOp::Structural(rel, structure) => {
                        let related: Set = r
                            .iter()
                            .copied()
                            .filter(|&ri| l.iter().any(|&li| self.holds(*rel, li, ri)))
                            .collect();
                        match structure {
                            Structure::Plain => related,
                            Structure::Not => r
                                .difference(&related)
                                .copied()
                                .filter(|&ri| *rel != Relation::Child || self.in_tree(ri))
                                .collect(),
                            Structure::Union => {
                                if related.is_empty() {
                                    return Set::new();
                                }
                                let left: Set = l
                                    .iter()
                                    .copied()
                                    .filter(|&li| r.iter().any(|&ri| self.holds(*rel, li, ri)))
                                    .collect();
                                left.union(&related).copied().collect()
                            }
                        }
                    }
                }
            }
        }
    }

    fn pipeline(
        &self,
        p: &Pipeline,
        mut sets: Vec<(Set, Vec<(String, String)>)>,
    ) -> Vec<(Set, Vec<(String, String)>)> {
        for stage in &p.stages {
            sets = match stage {
                Stage::Spansets(e) => sets
                    .into_iter()
                    .map(|(s, by)| (self.spansets(e, &s), by))
                    .filter(|(s, _)| !s.is_empty())
                    .collect(),
                Stage::ScalarFilter(sf) => {
                    // Aggregates are checked through a one-stage query on the
                    // same spans: count() is the reference's own.
                    sets.into_iter()
                        .filter(|(s, _)| match (&sf.lhs, &sf.rhs) {
                            (ScalarExpr::Count, ScalarExpr::Static(Static::Int(n))) => {
                                let c = s.len() as i64;
                                use crate::ast::CmpOp::*;
                                match sf.op {
                                    Eq => c == *n,
                                    Ne => c != *n,
                                    Gt => c > *n,
                                    Ge => c >= *n,
                                    Lt => c < *n,
                                    Le => c <= *n,
                                    Match | NotMatch => false,
                                }
                            }
                            _ => self.aggregate_holds(sf, s),
                        })
                        .collect()
                }
                Stage::By(field) => {
                    let c = Compiled::new(Query {
                        pipeline: Pipeline { stages: vec![] },
                        most_recent: false,
                        metrics: None,
                        hints: Vec::new(),
                    })
                    .expect("empty query");
                    let attr = match field {
                        crate::ast::FieldExpr::Attribute(a) => a.clone(),
                        other => panic!("by() over {other:?} is not generated"),
                    };
                    let mut out = Vec::new();
                    for (s, by) in sets {
                        let mut groups: BTreeMap<String, Set> = BTreeMap::new();
                        for &i in &s {
                            let text = c
                                .field_text(self.trace, i, &attr)
                                .map_or_else(|| "nil".to_owned(), |(t, _)| t);
                            groups.entry(text).or_default().insert(i);
                        }
                        for (text, g) in groups {
                            let mut by = by.clone();
                            by.push((label(&attr), text));
                            out.push((g, by));
                        }
                    }
                    out
                }
                Stage::Select(_) => sets,
                Stage::Coalesce => {
                    let all: Set = sets.into_iter().flat_map(|(s, _)| s).collect();
                    if all.is_empty() {
                        Vec::new()
                    } else {
                        vec![(all, Vec::new())]
                    }
                }
            };
        }
        sets
    }

    /// An aggregate filter, from the definition: the values of the spans,
    /// then min, max, sum or mean.
    fn aggregate_holds(&self, sf: &crate::ast::ScalarFilter, s: &Set) -> bool {
        let (ScalarExpr::Aggregate(agg, _), ScalarExpr::Static(Static::Duration(bound))) =
            (&sf.lhs, &sf.rhs)
        else {
            panic!("aggregate filter {sf:?} is not generated");
        };
        let d: Vec<i64> = s
            .iter()
            .map(|&i| self.trace.spans[i].duration_nanos() as i64)
            .collect();
        use crate::ast::Aggregate::*;
        let v: f64 = match agg {
            Min => *d.iter().min().expect("non-empty") as f64,
            Max => *d.iter().max().expect("non-empty") as f64,
            Sum => d.iter().sum::<i64>() as f64,
            Avg => (d.iter().sum::<i64>() as f64 / d.len() as f64).trunc(),
        };
        let b = *bound as f64;
        use crate::ast::CmpOp::*;
        match sf.op {
            Eq => v == b,
            Ne => v != b,
            Gt => v > b,
            Ge => v >= b,
            Lt => v < b,
            Le => v <= b,
            Match | NotMatch => false,
        }
    }
}

fn label(a: &crate::ast::Attribute) -> String {
    use crate::ast::{Attribute, Scope};
    match a {
        Attribute::Intrinsic(x) => x.name().to_owned(),
        Attribute::Attr { scope, name } => {
            let p = match scope {
                Scope::Resource => "resource",
                Scope::Span => "span",
                _ => "",
            };
            format!("{p}.{name}")
        }
    }
}

fn decode(parts: &[arbitrary::EncodedParts], id: [u8; 16]) -> Trace {
    Trace::decode(
        id,
        parts.iter().map(|(r, s, p)| EncodedSpan {
            payload: p,
            resource: Some(r),
            scope: Some(s),
        }),
    )
    .expect("generated spans decode")
}

#[test]
fn the_evaluator_agrees_with_the_reference_on_random_traces_and_queries() {
    let mut rng = Rng::new(31);
    let traces: Vec<Trace> = (0..60u8)
        .map(|t| {
            let id = [t; 16];
            decode(&arbitrary::trace(&mut rng, id, 1_000_000_000), id)
        })
        .collect();
    let mut matched_some = 0;
    let mut missed_some = 0;
    for _ in 0..400 {
        let query = arbitrary::query(&mut rng);
        let compiled = Compiled::new(query.clone()).expect("regexes compile");
        let mut hits = 0;
        for trace in &traces {
            let mut got: Vec<(Set, Vec<(String, String)>)> = compiled
                .eval(trace)
                .into_iter()
                .map(|s| (s.spans.into_iter().collect(), s.by))
                .collect();
            let all: Set = (0..trace.spans.len()).collect();
            let mut want = Reference { trace }.pipeline(&query.pipeline, vec![(all, Vec::new())]);
            got.sort();
            want.sort();
            assert_eq!(got, want, "query {query:?} on trace {:?}", trace.trace_id);
            hits += usize::from(!got.is_empty());
        }
        matched_some += usize::from(hits > 0);
        missed_some += usize::from(hits < traces.len());
    }
    // The generator is worth something only if its queries both match and miss.
    assert!(matched_some > 100, "{matched_some} queries matched a trace");
    assert!(missed_some > 100, "{missed_some} queries missed a trace");
}

/// The deepest trees a query can make (chains as long as the operator
/// limit, nesting as deep as the depth limit) evaluate, print and drop on
/// a thread with the default 2 MiB stack that the server's blocking threads
/// have, and answer what a shallow query of the same meaning answers. (A
/// stack overflow aborts the whole test process, which fails the run; the
/// limits themselves are tested where the parser enforces them, in
/// `parser/tests.rs`.)
#[test]
fn the_deepest_queries_evaluate_on_a_small_stack() {
    use crate::MAX_OPERATORS;
    // (deep query, a shallow one that means the same, or None where only
    // the round trip through text is checked)
    let queries = [
        (
            format!(
                "{}{{ .a = 1 }}",
                "{ .a = 1 } && ".repeat(MAX_OPERATORS / 2 - 1)
            ),
            Some("{ .a = 1 }".to_owned()),
        ),
        (
            format!(
                "{}{{ .a = 1 }}",
                "{ .a = 1 } >> ".repeat(MAX_OPERATORS / 2 - 1)
            ),
            None,
        ),
        (
            format!("{{ {}.a = 1 }}", ".a = 1 || ".repeat(MAX_OPERATORS / 2 - 1)),
            Some("{ .a = 1 }".to_owned()),
        ),
        (
            format!("{{ .a = {}2 }}", "2 ^ ".repeat(MAX_OPERATORS - 1)),
            None,
        ),
        // An even number of minus signs.
        (
            format!("{{ .a = {}2 }}", "-".repeat(crate::MAX_DEPTH - 2)),
            Some("{ .a = 2 }".to_owned()),
        ),
        (
            format!("{{ }} | count() > {}1", "1 + ".repeat(MAX_OPERATORS - 2)),
            Some(format!("{{ }} | count() > {}", MAX_OPERATORS - 1)),
        ),
    ];
    let mut rng = Rng::new(7);
    let id = [7; 16];
    let trace = decode(&arbitrary::trace(&mut rng, id, 1_000_000_000), id);
    let answered = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let mut matched = 0;
            for (q, shallow) in &queries {
                let parsed = crate::parse(q).expect("within the limits");
                let compiled = Compiled::new(parsed).expect("compiles");
                let got = compiled.eval(&trace);
                // Walked for its depth only.
                let _ = crate::needs(&compiled.query);
                let text = compiled.query.to_string();
                assert_eq!(
                    crate::parse(&text).expect("its text parses"),
                    compiled.query,
                    "{q} printed as {text}"
                );
                if let Some(shallow) = shallow {
                    let want = Compiled::new(crate::parse(shallow).expect("parses"))
                        .expect("compiles")
                        .eval(&trace);
                    assert_eq!(got, want, "{q} against {shallow}");
                    matched += usize::from(!got.is_empty());
                }
            }
            matched
        })
        .expect("thread")
        .join()
        .expect("the evaluating thread panicked");
    // The trace has spans with `.a = 1`: the comparisons are not of two
    // empty answers only.
    assert!(answered >= 2, "{answered} deep queries matched a span");
}
