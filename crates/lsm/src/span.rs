//! The unit of storage: one span, kept as its encoded OTLP bytes, plus the few
//! fields the engine needs to place and find it.
//!
//! A span's `payload` is the encoded `opentelemetry.proto.trace.v1.Span` exactly
//! as the client sent it, so nothing of it (attributes, events, links, status,
//! flags, trace_state, dropped counts, unknown fields) is lost. The resource and
//! instrumentation scope it was exported under live in a [`ScopeGroup`] shared
//! by every span of the same `ScopeSpans`, so they are stored once per request
//! in memory and once per block on disk.

use std::{fmt, str::FromStr, sync::Arc};

use bytes::Bytes;

/// A 128-bit trace ID. Ordered as a big-endian number, which is the byte order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TraceId(pub [u8; 16]);

/// The trace IDs from `start` (included) to `end` (excluded; `None`: to
/// the last), for a scan shared out among threads by trace ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceIdRange {
    pub start: TraceId,
    pub end: Option<TraceId>,
}

impl TraceIdRange {
    /// Every trace ID.
    pub const ALL: TraceIdRange = TraceIdRange {
        start: TraceId([0; 16]),
        end: None,
    };

    /// `n` ranges (at least one) of about equal width that cover every ID,
    /// in order; random trace IDs fall evenly among them.
    pub fn split(n: usize) -> Vec<TraceIdRange> {
        let n = n.max(1) as u128;
        let width = u128::MAX / n;
        let bound = |i: u128| TraceId((i * width).to_be_bytes());
        (0..n)
            .map(|i| TraceIdRange {
                start: bound(i),
                end: (i + 1 < n).then(|| bound(i + 1)),
            })
            .collect()
    }

    pub fn contains(&self, id: TraceId) -> bool {
        id >= self.start && self.end.is_none_or(|end| id < end)
    }
}

/// A 64-bit span ID.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SpanId(pub [u8; 8]);

/// Why a hex string is not an ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseIdError {
    #[error("expected {expected} hex digits, got {actual}")]
    Length { expected: usize, actual: usize },
    #[error("{0:?} is not a hex digit")]
    Digit(char),
}

macro_rules! hex_id {
    ($ty:ident, $n:literal) => {
        impl $ty {
            /// The ID from a byte slice, or `None` when it is not exactly
            #[doc = concat!(stringify!($n), " bytes long.")]
            pub fn from_slice(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map($ty)
            }

            /// True for the all-zero ID, which OTLP declares invalid.
            pub fn is_zero(&self) -> bool {
                self.0 == [0; $n]
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for b in self.0 {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($ty))
            }
        }

        impl FromStr for $ty {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if s.len() != 2 * $n {
                    return Err(ParseIdError::Length {
                        expected: 2 * $n,
                        actual: s.len(),
                    });
                }
                let mut out = [0u8; $n];
                let digits = s.as_bytes();
                for (i, byte) in out.iter_mut().enumerate() {
                    let hi = hex_value(digits[2 * i])?;
                    let lo = hex_value(digits[2 * i + 1])?;
                    *byte = hi << 4 | lo;
                }
                Ok($ty(out))
            }
        }
    };
}

hex_id!(TraceId, 16);
hex_id!(SpanId, 8);

fn hex_value(c: u8) -> Result<u8, ParseIdError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(ParseIdError::Digit(char::from(c))),
    }
}

/// The resource and instrumentation scope a group of spans was exported under,
/// as encoded OTLP messages. `None` means the field was absent on the wire.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct ScopeGroup {
    /// Encoded `opentelemetry.proto.resource.v1.Resource`.
    pub resource: Option<Bytes>,
    /// `ResourceSpans.schema_url`.
    pub resource_schema_url: Bytes,
    /// Encoded `opentelemetry.proto.common.v1.InstrumentationScope`.
    pub scope: Option<Bytes>,
    /// `ScopeSpans.schema_url`.
    pub scope_schema_url: Bytes,
}

/// One stored span.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Shared by every span of the same `ScopeSpans` of one request (or block).
    pub group: Arc<ScopeGroup>,
    /// The encoded `opentelemetry.proto.trace.v1.Span`, as received.
    pub payload: Bytes,
}

impl Span {
    /// The order of a trace's spans as every read returns them: by start
    /// time, then span ID; spans that share both (a shared span ID, a span
    /// sent twice with changes) by their bytes, so the order is total and an
    /// exact repeat sits next to its original.
    pub fn read_order(&self, other: &Span) -> std::cmp::Ordering {
        (self.start_unix_nano, self.span_id)
            .cmp(&(other.start_unix_nano, other.span_id))
            .then_with(|| self.payload.cmp(&other.payload))
            .then_with(|| {
                if Arc::ptr_eq(&self.group, &other.group) {
                    std::cmp::Ordering::Equal
                } else {
                    self.group.cmp(&other.group)
                }
            })
    }

    /// True when `other` is an exact repeat of this span: the same bytes
    /// under the same resource and scope, as a retried export resends them.
    /// Spans that merely share a span ID are not repeats: each is kept.
    pub fn is_repeat_of(&self, other: &Span) -> bool {
        self.trace_id == other.trace_id
            && self.span_id == other.span_id
            && self.payload == other.payload
            && (Arc::ptr_eq(&self.group, &other.group) || self.group == other.group)
    }

    /// Bytes this span holds in memory beyond its share of the request buffer;
    /// used to decide when a memtable is full.
    pub fn memory_size(&self) -> usize {
        std::mem::size_of::<Span>() + self.payload.len()
    }
}

/// Puts one trace's spans in [`Span::read_order`] and drops exact repeats
/// ([`Span::is_repeat_of`]), keeping every span that differs, even from
/// another span of the same ID. Returns how many spans were dropped.
pub fn drop_repeats(spans: &mut Vec<Span>) -> usize {
    let before = spans.len();
    spans.sort_by(Span::read_order);
    spans.dedup_by(|later, earlier| later.is_repeat_of(earlier));
    before - spans.len()
}

/// [`drop_repeats`], each span dropped given to `dropped` (a merge that
/// adds its outputs' metrics cells up from its inputs' takes them back out).
pub fn drop_repeats_into(spans: &mut Vec<Span>, dropped: &mut Vec<Span>) -> usize {
    spans.sort_by(Span::read_order);
    let mut kept = 0;
    for at in 0..spans.len() {
        if kept > 0 && spans[at].is_repeat_of(&spans[kept - 1]) {
            dropped.push(spans[at].clone());
        } else {
            spans.swap(kept, at);
            kept += 1;
        }
    }
    let n = spans.len() - kept;
    spans.truncate(kept);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_id_hex_round_trip() {
        let id: TraceId = "0123456789abcdefFEDCBA9876543210"
            .parse()
            .expect("valid hex");
        assert_eq!(id.0[0], 0x01);
        assert_eq!(id.0[15], 0x10);
        assert_eq!(id.to_string(), "0123456789abcdeffedcba9876543210");
    }

    #[test]
    fn bad_hex_is_rejected() {
        assert_eq!(
            "abc".parse::<TraceId>(),
            Err(ParseIdError::Length {
                expected: 32,
                actual: 3
            })
        );
        assert_eq!(
            "zz".repeat(8).parse::<SpanId>(),
            Err(ParseIdError::Digit('z'))
        );
    }

    #[test]
    fn trace_ids_order_as_big_endian_numbers() {
        let small = TraceId(u128::to_be_bytes(0x00ff));
        let big = TraceId(u128::to_be_bytes(0x0100));
        assert!(small < big);
    }

    #[test]
    fn only_exact_repeats_are_dropped_and_spans_sharing_an_id_are_kept() {
        let group = |service: &[u8]| {
            Arc::new(ScopeGroup {
                resource: Some(Bytes::copy_from_slice(service)),
                ..ScopeGroup::default()
            })
        };
        let span = |start: u64, payload: &'static [u8], group: Arc<ScopeGroup>| Span {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([2; 8]),
            start_unix_nano: start,
            end_unix_nano: start + 1,
            group,
            payload: Bytes::from_static(payload),
        };
        let a = group(b"a");
        let mut spans = vec![
            span(20, b"later", a.clone()),
            span(10, b"name a", a.clone()),
            span(10, b"name b", a.clone()),
            // The same bytes, another resource: a different span.
            span(10, b"name a", group(b"b")),
            // Exact repeats, one through another Arc of an equal group.
            span(10, b"name a", group(b"a")),
            span(20, b"later", a.clone()),
        ];
        assert_eq!(drop_repeats(&mut spans), 2);
        let kept: Vec<(u64, &[u8], &[u8])> = spans
            .iter()
            .map(|s| {
                let resource = s.group.resource.as_deref().unwrap_or_default();
                (s.start_unix_nano, &s.payload[..], resource)
            })
            .collect();
        assert_eq!(
            kept,
            vec![
                (10, &b"name a"[..], &b"a"[..]),
                (10, &b"name a"[..], &b"b"[..]),
                (10, &b"name b"[..], &b"a"[..]),
                (20, &b"later"[..], &b"a"[..]),
            ]
        );
    }
}
