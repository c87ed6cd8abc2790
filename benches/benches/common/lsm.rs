//! Span generators shared by the lsm benchmarks (included with `#[path]`; a subfolder, so cargo does not take it for a bench).

use std::sync::Arc;

use bytes::Bytes;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{ScopeGroup, Span, SpanId, TraceId};

/// A span of about 200 payload bytes, like a small real span.
pub fn span(group: &Arc<ScopeGroup>, trace: u128, i: u64) -> Span {
    Span {
        trace_id: TraceId(trace.to_be_bytes()),
        span_id: SpanId((i + 1).to_be_bytes()),
        start_unix_nano: 1_700_000_000_000_000_000 + i,
        end_unix_nano: 1_700_000_000_000_000_000 + i + 1_000,
        group: group.clone(),
        payload: Bytes::from(vec![(i % 251) as u8; 200]),
    }
}

/// `n` spans sorted by trace ID, 5-50 spans per trace, random IDs.
pub fn sorted_spans(n: usize, seed: u64) -> Vec<Span> {
    let group = Arc::new(ScopeGroup::default());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let trace: u128 = rng.random();
        let k = rng.random_range(5..=50);
        for _ in 0..k {
            out.push(span(&group, trace, out.len() as u64));
        }
    }
    out.truncate(n);
    tracedb_lsm::sort::sort_by_trace_id(&mut out);
    out
}
