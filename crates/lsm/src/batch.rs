//! The encoding of a batch of spans, shared by WAL records and file data blocks.
//!
//! A batch stores each distinct [`ScopeGroup`] once and each span as its fixed
//! key fields followed by its payload. Decoding slices the payloads and group
//! fields out of the input `Bytes` without copying. The byte layout is in
//! `docs/FORMAT.md` ("Span batch").

use std::sync::Arc;

use bytes::Bytes;

use crate::span::{ScopeGroup, Span, SpanId, TraceId};

/// Why an encoded batch could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("varint too long at byte {0}")]
    BadVarint(usize),
    #[error("span {span} names group {group}, but the batch has {groups} groups")]
    BadGroup {
        span: usize,
        group: u64,
        groups: usize,
    },
    #[error("{0} trailing bytes after the last span")]
    Trailing(usize),
    #[error("count {count} at byte {at} cannot fit in the {remaining} bytes left")]
    BadCount {
        count: u64,
        at: usize,
        remaining: usize,
    },
    #[error("span {span}: {what}")]
    Inconsistent { span: usize, what: &'static str },
}

/// Fixed bytes of a span record before its group index and payload.
const SPAN_FIXED: usize = 16 + 8 + 8 + 8;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Appends the encoding of `spans` to `out`.
pub fn encode_batch(spans: &[Span], out: &mut Vec<u8>) {
    let indexes = encode_groups(spans, out);
    put_varint(out, spans.len() as u64);
    for (span, idx) in spans.iter().zip(indexes) {
        out.extend_from_slice(&span.trace_id.0);
        out.extend_from_slice(&span.span_id.0);
        out.extend_from_slice(&span.start_unix_nano.to_le_bytes());
        out.extend_from_slice(&span.end_unix_nano.to_le_bytes());
        put_varint(out, u64::from(idx));
        put_bytes(out, &span.payload);
    }
}

/// Appends the distinct groups of `spans` (count, then each group) to `out`;
/// returns each span's index into them.
pub(crate) fn encode_groups(spans: &[Span], out: &mut Vec<u8>) -> Vec<u32> {
    // Groups are deduplicated first by pointer (spans of one request share an
    // Arc, and in a sorted file mostly sit next to each other), then by
    // content (the same service exports many requests). Every span of a flush
    // and of a WAL record comes through here: the maps hash with foldhash.
    let mut by_ptr: HashMap<*const ScopeGroup, u32> = HashMap::default();
    let mut by_content: HashMap<&ScopeGroup, u32> = HashMap::default();
    let mut groups: Vec<&ScopeGroup> = Vec::new();
    let mut indexes: Vec<u32> = Vec::with_capacity(spans.len());
    let mut last: Option<(*const ScopeGroup, u32)> = None;
    for span in spans {
        let ptr = Arc::as_ptr(&span.group);
        let idx = match last {
            Some((p, idx)) if p == ptr => idx,
            _ => *by_ptr.entry(ptr).or_insert_with(|| {
                *by_content.entry(&span.group).or_insert_with(|| {
                    groups.push(&span.group);
                    (groups.len() - 1) as u32
                })
            }),
        };
        last = Some((ptr, idx));
        indexes.push(idx);
    }
    put_varint(out, groups.len() as u64);
    for group in &groups {
        put_opt_bytes(out, group.resource.as_deref());
        put_bytes(out, &group.resource_schema_url);
        put_opt_bytes(out, group.scope.as_deref());
        put_bytes(out, &group.scope_schema_url);
    }
    indexes
}

/// Reads what [`encode_groups`] wrote; the group fields are slices of the
/// reader's buffer.
pub(crate) fn decode_groups(r: &mut Reader<'_>) -> Result<Vec<Arc<ScopeGroup>>, BatchError> {
    let n_groups = r.count(4)?;
    let mut groups = Vec::with_capacity(n_groups);
    for _ in 0..n_groups {
        let resource = r.opt_bytes()?;
        let resource_schema_url = r.bytes()?;
        let scope = r.opt_bytes()?;
        let scope_schema_url = r.bytes()?;
        groups.push(Arc::new(ScopeGroup {
            resource,
            resource_schema_url,
            scope,
            scope_schema_url,
        }));
    }
    Ok(groups)
}

/// Decodes a whole batch; every byte of `buf` must belong to it.
pub fn decode_batch(buf: &Bytes) -> Result<Vec<Span>, BatchError> {
    let mut r = Reader::new(buf);
    let groups = decode_groups(&mut r)?;
    let n_spans = r.count(SPAN_FIXED + 2)?;
    let mut spans = Vec::with_capacity(n_spans);
    for i in 0..n_spans {
        let fixed = r.take(SPAN_FIXED)?;
        let trace_id = TraceId(fixed[0..16].try_into().expect("16-byte slice"));
        let span_id = SpanId(fixed[16..24].try_into().expect("8-byte slice"));
        let start_unix_nano = u64::from_le_bytes(fixed[24..32].try_into().expect("8-byte slice"));
        let end_unix_nano = u64::from_le_bytes(fixed[32..40].try_into().expect("8-byte slice"));
        let group_idx = r.varint()?;
        let group = usize::try_from(group_idx)
            .ok()
            .and_then(|g| groups.get(g))
            .ok_or(BatchError::BadGroup {
                span: i,
                group: group_idx,
                groups: groups.len(),
            })?
            .clone();
        let payload = r.bytes()?;
        spans.push(Span {
            trace_id,
            span_id,
            start_unix_nano,
            end_unix_nano,
            group,
            payload,
        });
    }
    if r.pos != buf.len() {
        return Err(BatchError::Trailing(buf.len() - r.pos));
    }
    Ok(spans)
}

pub(crate) use tracedb_proto::wire::put_varint;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Absent is encoded as 0, present as `len + 1`.
fn put_opt_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, 0),
        Some(b) => {
            put_varint(out, b.len() as u64 + 1);
            out.extend_from_slice(b);
        }
    }
}

pub(crate) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a Bytes) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn varint(&mut self) -> Result<u64, BatchError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(BatchError::Truncated(self.pos))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(BatchError::BadVarint(self.pos))
    }

    /// A count of items that take at least `min_size` bytes each: refusing counts the
    /// remaining input cannot hold keeps a hostile length from allocating gigabytes.
    pub(crate) fn count(&mut self, min_size: usize) -> Result<usize, BatchError> {
        let at = self.pos;
        let count = self.varint()?;
        let remaining = self.buf.len() - self.pos;
        match usize::try_from(count) {
            Ok(n) if n.saturating_mul(min_size) <= remaining => Ok(n),
            _ => Err(BatchError::BadCount {
                count,
                at,
                remaining,
            }),
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8], BatchError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(BatchError::Truncated(self.pos))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn slice(&mut self, n: u64) -> Result<Bytes, BatchError> {
        let n = usize::try_from(n).map_err(|_| BatchError::Truncated(self.pos))?;
        let start = self.pos;
        self.take(n)?;
        Ok(self.buf.slice(start..start + n))
    }

    pub(crate) fn bytes(&mut self) -> Result<Bytes, BatchError> {
        let n = self.varint()?;
        self.slice(n)
    }

    pub(crate) fn opt_bytes(&mut self) -> Result<Option<Bytes>, BatchError> {
        match self.varint()? {
            0 => Ok(None),
            n => self.slice(n - 1).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{group, span};

    #[test]
    fn round_trip_keeps_every_field_and_shares_groups() {
        let g1 = group("svc-a");
        let g2 = Arc::new(ScopeGroup {
            resource: None,
            ..ScopeGroup::default()
        });
        let spans = vec![
            span(&g1, 1, 1, 10),
            span(&g2, 2, 2, 20),
            span(&g1, 1, 3, 30),
        ];
        let mut buf = Vec::new();
        encode_batch(&spans, &mut buf);
        let decoded = decode_batch(&Bytes::from(buf)).expect("decodes");
        assert_eq!(decoded.len(), 3);
        for (a, b) in spans.iter().zip(&decoded) {
            assert_eq!(a.trace_id, b.trace_id);
            assert_eq!(a.span_id, b.span_id);
            assert_eq!(a.start_unix_nano, b.start_unix_nano);
            assert_eq!(a.end_unix_nano, b.end_unix_nano);
            assert_eq!(a.payload, b.payload);
            assert_eq!(*a.group, *b.group);
        }
        assert!(Arc::ptr_eq(&decoded[0].group, &decoded[2].group));
        assert_eq!(decoded[1].group.resource, None);
    }

    #[test]
    fn equal_groups_behind_different_arcs_are_stored_once() {
        let spans = vec![span(&group("svc"), 1, 1, 1), span(&group("svc"), 2, 2, 2)];
        let mut buf = Vec::new();
        encode_batch(&spans, &mut buf);
        assert_eq!(buf[0], 1, "one group");
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let g = group("svc");
        let spans = vec![span(&g, 1, 1, 10), span(&g, 2, 2, 20)];
        let mut buf = Vec::new();
        encode_batch(&spans, &mut buf);
        for len in 0..buf.len() {
            let cut = Bytes::copy_from_slice(&buf[..len]);
            assert!(decode_batch(&cut).is_err(), "prefix of {len} bytes decoded");
        }
    }

    #[test]
    fn hostile_count_does_not_allocate() {
        let mut buf = Vec::new();
        put_varint(&mut buf, u64::MAX);
        assert!(matches!(
            decode_batch(&Bytes::from(buf)),
            Err(BatchError::BadCount { .. })
        ));
    }
}
