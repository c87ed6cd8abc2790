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

/// Search rows from every node, as one answer: within a group, the rows of
/// one trace from several nodes (its parts) are combined with `combine`;
/// across groups, the copy with the most spans stands. Newest first (by
/// start, then trace ID), at most `limit`. `key` gives a row's trace ID,
/// start and span count; `read` turns a node's row into one (`None`:
/// malformed, skipped).
pub(super) fn merge_rows<T>(
    groups: &[Vec<NodeOutcome<tracedb_proto::query::v1::SearchTracesResponse>>],
    read: impl Fn(&tracedb_proto::query::v1::TraceSummary) -> Option<T>,
    key: impl Fn(&T) -> (TraceId, u64, u64),
    combine: impl Fn(&mut T, &T),
    limit: usize,
) -> Vec<T> {
    let mut best: HashMap<TraceId, T> = HashMap::new();
    for nodes in groups {
        let mut parts: HashMap<TraceId, T> = HashMap::new();
        for (_, outcome) in nodes {
            let Outcome::Answered(response, _) = outcome else {
                continue;
            };
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
