//! The tier's merge of the matches its nodes answered for the parts of one
//! trace.

use super::{add_stats, Match};

/// Adds `other`, the match of another part of the same trace (another node
/// of a group), to `m`: the parts' spans together, each span once; the
/// spansets of a per-span query ([`per_span_only`](super::per_span_only)) are
/// one set per node.
pub fn combine(m: &mut Match, other: &Match, spans_per_spanset: usize) {
    m.orphans = None;
    let end =
        (m.start_unix_nano + m.duration_nanos).max(other.start_unix_nano + other.duration_nanos);
    m.start_unix_nano = m.start_unix_nano.min(other.start_unix_nano);
    m.duration_nanos = end - m.start_unix_nano;
    m.span_count += other.span_count;
    m.error_count += other.error_count;
    if m.root_service.is_none() && m.root_name.is_none() {
        m.root_service.clone_from(&other.root_service);
        m.root_name.clone_from(&other.root_name);
    }
    m.services.extend(other.services.iter().cloned());
    m.services.sort();
    m.services.dedup();
    add_stats(&mut m.service_stats, &other.service_stats);
    match (m.spansets.first_mut(), other.spansets.first()) {
        (Some(mine), Some(theirs)) => {
            mine.matched += theirs.matched;
            for span in &theirs.spans {
                if !mine.spans.contains(span) {
                    mine.spans.push(span.clone());
                }
            }
            mine.spans.sort_by_key(|s| (s.start_unix_nano, s.span_id));
            mine.spans.truncate(spans_per_spanset);
        }
        (None, Some(_)) => m.spansets.clone_from(&other.spansets),
        _ => {}
    }
}
