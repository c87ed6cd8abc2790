//! Merging the nodes' answers: the spans of their traces, the union of
//! their lists, and their search rows (parts of a trace within a group
//! combined, the fullest copy across groups kept).

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use tracedb_lsm::{Span, TraceId};
use tracedb_otlp::{scan_export_request, TimeRules};

use super::gather::{NodeOutcome, Outcome};
use crate::error::Error;

/// The spans of encoded `TracesData` messages, each as the engine would
/// store it: cut out of the bytes by the ingest's scanner (`TracesData` and
/// an export request share their wire shape: resource spans are field 1),
/// so a span's payload is a slice of the message, never decoded and
/// encoded again. Returns why spans the scanner refused (none a node would
/// have stored) were left out, for the answer's partial mark.
pub(super) fn spans_of(messages: &[Bytes], out: &mut Vec<Span>) -> Result<Vec<String>, Error> {
    let mut left_out = Vec::new();
    for bytes in messages {
        let scanned = scan_export_request(bytes, out, TimeRules::ANY)
            .map_err(|e| Error::Internal(format!("a node sent a malformed trace: {e}")))?;
        if scanned.rejected > 0 {
            left_out.push(format!(
                "{} spans from a node could not be read: {}",
                scanned.rejected, scanned.rejection_message
            ));
        }
    }
    Ok(left_out)
}

/// Sorted union of the nodes' lists.
pub(super) fn union<T: Ord + Clone>(
    lists: impl Iterator<Item = impl IntoIterator<Item = T>>,
) -> BTreeSet<T> {
    lists.flatten().collect()
}

/// The answers of each group's nodes that answered, for [`merge_rows`].
pub(super) fn answered_by_group<T>(groups: &[Vec<NodeOutcome<T>>]) -> Vec<Vec<&T>> {
    groups
        .iter()
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|(_, outcome)| match outcome {
                    Outcome::Answered(answer, _) => Some(answer),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// Search rows from every node that answered (per group), as one answer:
/// within a group, the rows of one trace from several nodes (its parts) are
/// combined with `combine`; across groups, the copy with the most spans
/// stands (the first group's on a tie). Newest first (by start, then trace
/// ID), at most `limit`. `key` gives a row's trace ID, start and span
/// count; `read` turns a node's row into one (`None`: malformed, skipped).
pub(super) fn merge_rows<T>(
    groups: &[Vec<&tracedb_proto::query::v1::SearchTracesResponse>],
    read: impl Fn(&tracedb_proto::query::v1::TraceSummary) -> Option<T>,
    key: impl Fn(&T) -> (TraceId, u64, u64),
    combine: impl Fn(&mut T, &T),
    limit: usize,
) -> Vec<T> {
    let mut best: HashMap<TraceId, T> = HashMap::new();
    for nodes in groups {
        let mut parts: HashMap<TraceId, T> = HashMap::new();
        for response in nodes {
            for row in response.traces.iter().filter_map(&read) {
                let id = key(&row).0;
                match parts.get_mut(&id) {
                    Some(part) => combine(part, &row),
                    None => {
                        parts.insert(id, row);
                    }
                }
            }
        }
        for (id, row) in parts {
            match best.get(&id) {
                Some(b) if key(b).2 >= key(&row).2 => {}
                _ => {
                    best.insert(id, row);
                }
            }
        }
    }
    let mut rows: Vec<T> = best.into_values().collect();
    rows.sort_by(|a, b| {
        let (a, b) = (key(a), key(b));
        b.1.cmp(&a.1).then(a.0.cmp(&b.0))
    });
    rows.truncate(limit);
    rows
}

#[cfg(test)]
mod tests {
    use tracedb_proto::query::v1::{SearchTracesResponse, TraceSummary};

    use super::*;

    /// A node's row: trace, start, spans.
    fn row(trace: u8, start: u64, spans: u32) -> TraceSummary {
        TraceSummary {
            trace_id: vec![trace; 16].into(),
            start_time_unix_nano: start,
            span_count: u64::from(spans),
            ..TraceSummary::default()
        }
    }

    fn node(rows: &[(u8, u64, u32)]) -> SearchTracesResponse {
        SearchTracesResponse {
            traces: rows.iter().map(|&(t, s, n)| row(t, s, n)).collect(),
        }
    }

    /// A row as the tests write it: (trace, start, spans).
    type Row = (u8, u64, u32);
    /// Groups of nodes, each node's rows.
    type Groups = Vec<Vec<Vec<Row>>>;

    /// Rows merged from groups of nodes, as the tier merges them: parts
    /// added within a group (the earliest start), the fullest copy across
    /// groups.
    fn merged(groups: &Groups, limit: usize) -> Vec<Row> {
        let answers: Vec<Vec<SearchTracesResponse>> = groups
            .iter()
            .map(|g| g.iter().map(|rows| node(rows)).collect())
            .collect();
        let refs: Vec<Vec<&SearchTracesResponse>> =
            answers.iter().map(|g| g.iter().collect()).collect();
        merge_rows(
            &refs,
            |r| {
                let id: [u8; 16] = r.trace_id[..].try_into().ok()?;
                Some((TraceId(id), r.start_time_unix_nano, r.span_count))
            },
            |&(id, start, spans)| (id, start, spans),
            |a, b| {
                a.1 = a.1.min(b.1);
                a.2 += b.2;
            },
            limit,
        )
        .into_iter()
        .map(|(id, start, spans)| (id.0[0], start, spans as u32))
        .collect()
    }

    #[test]
    fn rows_merge_within_groups_and_across_them() {
        let cases: [(&str, Groups, usize, Vec<Row>); 7] = [
            ("no node answered", vec![vec![]], 10, vec![]),
            (
                "one node: newest first, ties by trace ID",
                vec![vec![vec![(1, 10, 1), (3, 30, 1), (2, 30, 1)]]],
                10,
                vec![(2, 30, 1), (3, 30, 1), (1, 10, 1)],
            ),
            (
                "a trace's parts on two nodes of a group: added, earliest start",
                vec![vec![vec![(1, 20, 2)], vec![(1, 10, 3), (2, 5, 1)]]],
                10,
                vec![(1, 10, 5), (2, 5, 1)],
            ),
            (
                "two groups, each whole: one row, not added",
                vec![vec![vec![(1, 10, 4)]], vec![vec![(1, 10, 4)]]],
                10,
                vec![(1, 10, 4)],
            ),
            (
                "a group missing a part: the fuller group's copy stands",
                vec![
                    vec![vec![(1, 20, 2)]],
                    vec![vec![(1, 20, 2)], vec![(1, 10, 3)]],
                ],
                10,
                vec![(1, 10, 5)],
            ),
            (
                "a trace only one group has",
                vec![vec![vec![(1, 10, 1)]], vec![vec![(2, 20, 1)]]],
                10,
                vec![(2, 20, 1), (1, 10, 1)],
            ),
            (
                "the limit cuts the oldest after merging",
                vec![vec![
                    vec![(1, 10, 1), (2, 20, 1)],
                    vec![(3, 30, 1), (1, 40, 1)],
                ]],
                2,
                vec![(3, 30, 1), (2, 20, 1)],
            ),
        ];
        for (what, groups, limit, want) in cases {
            assert_eq!(merged(&groups, limit), want, "{what}");
        }
    }

    #[test]
    fn the_union_of_lists_is_sorted_and_each_value_once() {
        let lists = [vec!["b", "a"], vec![], vec!["c", "a"]];
        assert_eq!(
            union(lists.iter().cloned()).into_iter().collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }
}
