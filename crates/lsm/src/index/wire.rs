//! A light scan of the few OTLP fields the search index needs, straight off
//! the stored bytes: no prost tree; string values are borrowed from the bytes,
//! only numbers and booleans are rendered into new strings. Fields it does not need are skipped by wire type.
//!
//! Field numbers used: Span.span_id = 2, .parent_span_id = 4, .name = 5,
//! .kind = 6, .start_time_unix_nano = 7, .end_time_unix_nano = 8,
//! .attributes = 9, .status = 15; Status.code = 3; Resource.attributes = 1;
//! KeyValue.key = 1, .value = 2; AnyValue.string_value = 1, .bool_value = 2,
//! .int_value = 3, .double_value = 4.
//!
//! Spans were validated by the ingest scanner before they were stored; a span
//! this scan cannot read anyway yields what it read so far and is summarized
//! from that, never a panic.

use std::borrow::Cow;

use super::ValueKind;

/// Attribute values longer than this are not indexed (they are rarely searched
/// for by equality and would bloat the index).
pub const MAX_VALUE_BYTES: usize = 256;

/// The fields of a span the index keeps.
#[derive(Debug, Default)]
pub struct SpanFields<'a> {
    pub span_id: &'a [u8],
    pub parent_span_id: &'a [u8],
    /// As stored: UTF-8 unless the span was damaged after ingest checked it.
    pub name: &'a [u8],
    pub kind: u8,
    /// The kind as sent (`kind` is 0 for one past 255).
    pub kind_value: u32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// `Status.code`: 0 (unset) without a status.
    pub status: u32,
    pub error: bool,
}

/// One protobuf field: number and value.
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

/// Iterates the top-level fields of one message; stops at the first malformed byte.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Field<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let key = varint(&mut self.buf)?;
        let number = u32::try_from(key >> 3).ok()?;
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut self.buf)?),
            1 => {
                let (head, rest) = self.buf.split_first_chunk::<8>()?;
                self.buf = rest;
                Field::Fixed64(u64::from_le_bytes(*head))
            }
            2 => {
                let len = usize::try_from(varint(&mut self.buf)?).ok()?;
                if len > self.buf.len() {
                    self.buf = &[];
                    return None;
                }
                let (head, rest) = self.buf.split_at(len);
                self.buf = rest;
                Field::Bytes(head)
            }
            5 => {
                self.buf = self.buf.get(4..)?;
                Field::Fixed32
            }
            _ => {
                self.buf = &[];
                return None;
            }
        };
        Some((number, field))
    }
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    // Field keys, lengths and most small numbers fit in one byte.
    if let Some((&byte, rest)) = buf.split_first() {
        if byte < 0x80 {
            *buf = rest;
            return Some(u64::from(byte));
        }
    }
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Scans an encoded `opentelemetry.proto.trace.v1.Span`. The encoded
/// `KeyValue` of each of its attributes replaces what `attributes` held (a
/// buffer the caller reuses from span to span); [`key_value`] reads one. The
/// attributes of a trace repeat from span to span, so a caller that remembers
/// what it read of each encoding reads it once.
pub fn scan_span<'a>(payload: &'a [u8], attributes: &mut Vec<&'a [u8]>) -> SpanFields<'a> {
    attributes.clear();
    scan(payload, |kv| attributes.push(kv))
}

/// [`scan_span`] without the attributes.
pub fn scan_fields(payload: &[u8]) -> SpanFields<'_> {
    scan(payload, |_| {})
}

/// [`scan_span`], each attribute's encoded `KeyValue` handed to `attribute`.
pub fn scan_with<'a>(payload: &'a [u8], attribute: impl FnMut(&'a [u8])) -> SpanFields<'a> {
    scan(payload, attribute)
}

fn scan<'a>(payload: &'a [u8], mut attribute: impl FnMut(&'a [u8])) -> SpanFields<'a> {
    // One loop over the span's top-level fields, each field's number and
    // wire type matched at once: the scan runs for every span at every
    // flush and merge, and [`Fields`] built a value of each field first,
    // the fields read here included.
    let mut out = SpanFields::default();
    let mut buf = payload;
    while !buf.is_empty() {
        let Some(key) = varint(&mut buf) else { break };
        match key {
            // Length-delimited: span_id, parent_span_id, name, attributes, status.
            0x12 | 0x22 | 0x2a | 0x4a | 0x7a => {
                let Some(len) = varint(&mut buf).and_then(|l| usize::try_from(l).ok()) else {
                    break;
                };
                let Some((b, rest)) = buf.split_at_checked(len) else {
                    break;
                };
                buf = rest;
                match key {
                    0x12 => out.span_id = b,
                    0x22 => out.parent_span_id = b,
                    0x2a => out.name = b,
                    0x4a => attribute(b),
                    _ => {
                        out.status = 0;
                        for f in fields(b) {
                            if let (3, Field::Varint(code)) = f {
                                out.status = u32::try_from(code).unwrap_or(u32::MAX);
                            }
                        }
                        out.error = out.status == 2;
                    }
                }
            }
            // kind
            0x30 => {
                let Some(v) = varint(&mut buf) else { break };
                out.kind = u8::try_from(v).unwrap_or(0);
                out.kind_value = u32::try_from(v).unwrap_or(u32::MAX);
            }
            // start_time_unix_nano, end_time_unix_nano
            0x39 | 0x41 => {
                let Some((head, rest)) = buf.split_first_chunk::<8>() else {
                    break;
                };
                buf = rest;
                let v = u64::from_le_bytes(*head);
                if key == 0x39 {
                    out.start_unix_nano = v;
                } else {
                    out.end_unix_nano = v;
                }
            }
            // Any other field, skipped by its wire type (a field number
            // past `u32` is malformed, as [`Fields`] takes it).
            _ if key >> 3 > u64::from(u32::MAX) => break,
            _ => {
                let skipped = match key & 7 {
                    0 => varint(&mut buf).map(|_| ()),
                    1 => buf.get(8..).map(|rest| buf = rest),
                    2 => varint(&mut buf)
                        .and_then(|l| usize::try_from(l).ok())
                        .and_then(|len| buf.get(len..))
                        .map(|rest| buf = rest),
                    5 => buf.get(4..).map(|rest| buf = rest),
                    _ => None,
                };
                if skipped.is_none() {
                    break;
                }
            }
        }
    }
    out
}

/// The attributes of an encoded `opentelemetry.proto.resource.v1.Resource`.
pub fn scan_resource(resource: &[u8]) -> Vec<(&str, Cow<'_, str>, ValueKind)> {
    fields(resource)
        .filter_map(|f| match f {
            (1, Field::Bytes(b)) => key_value(b),
            _ => None,
        })
        .collect()
}

/// The encoded `KeyValue` of the first attribute named `key` of an encoded
/// `Resource`, as stored.
pub fn resource_attribute<'a>(resource: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    fields(resource).find_map(|f| match f {
        (1, Field::Bytes(kv)) => fields(kv)
            .any(|f| matches!(f, (1, Field::Bytes(k)) if k == key))
            .then_some(kv),
        _ => None,
    })
}

/// The encoded `KeyValue`s of an encoded `Resource`'s attributes, in order.
pub fn resource_attributes(resource: &[u8]) -> impl Iterator<Item = &[u8]> {
    fields(resource).filter_map(|f| match f {
        (1, Field::Bytes(kv)) => Some(kv),
        _ => None,
    })
}

/// The key of an encoded `KeyValue`, as stored (the last, as a decoder
/// takes a field sent twice).
pub fn key_of(kv: &[u8]) -> Option<&[u8]> {
    // As encoders write it: the key, then the value to the end, each of a
    // length under 128.
    if let [0x0a, len @ 0..0x80, rest @ ..] = kv {
        let (key, rest) = rest.split_at_checked(usize::from(*len))?;
        if let [0x12, len @ 0..0x80, value @ ..] = rest {
            if value.len() == usize::from(*len) {
                return Some(key);
            }
        }
    }
    fields(kv)
        .filter_map(|f| match f {
            (1, Field::Bytes(k)) => Some(k),
            _ => None,
        })
        .last()
}

/// An encoded `KeyValue` as (key, value, type): strings, bools, ints and
/// doubles as text (numbers and booleans rendered), any other value (and a
/// string too long or not UTF-8) as [`ValueKind::Unindexed`] with no text.
pub fn key_value(buf: &[u8]) -> Option<(&str, Cow<'_, str>, ValueKind)> {
    let mut key = None;
    let mut value = None;
    for f in fields(buf) {
        match f {
            (1, Field::Bytes(b)) => key = std::str::from_utf8(b).ok(),
            (2, Field::Bytes(b)) => value = any_value(b),
            _ => {}
        }
    }
    let (value, kind) = value?;
    Some((key?, value, kind))
}

fn any_value(buf: &[u8]) -> Option<(Cow<'_, str>, ValueKind)> {
    let mut out = None;
    for f in fields(buf) {
        out = match f {
            (1, Field::Bytes(b)) => Some(
                std::str::from_utf8(b)
                    .ok()
                    .filter(|_| b.len() <= MAX_VALUE_BYTES)
                    .map_or((Cow::Borrowed(""), ValueKind::Unindexed), |s| {
                        (Cow::Borrowed(s), ValueKind::Str)
                    }),
            ),
            (2, Field::Varint(v)) => Some((
                Cow::Borrowed(if v != 0 { "true" } else { "false" }),
                ValueKind::Bool,
            )),
            (3, Field::Varint(v)) => Some((Cow::Owned((v as i64).to_string()), ValueKind::Int)),
            (4, Field::Fixed64(v)) => {
                Some((Cow::Owned(f64::from_bits(v).to_string()), ValueKind::Float))
            }
            // An array, a key-value list, bytes.
            (5..=7, Field::Bytes(_)) => Some((Cow::Borrowed(""), ValueKind::Unindexed)),
            _ => None,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use tracedb_proto::wire::put_varint;

    use super::*;

    fn bytes_field(out: &mut Vec<u8>, n: u64, b: &[u8]) {
        put_varint(out, n << 3 | 2);
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    #[test]
    fn reads_the_indexed_fields_and_skips_the_rest() {
        let mut value = Vec::new();
        put_varint(&mut value, 3 << 3);
        put_varint(&mut value, (-5i64) as u64);
        let mut kv = Vec::new();
        bytes_field(&mut kv, 1, b"retries");
        bytes_field(&mut kv, 2, &value);
        let mut status = Vec::new();
        put_varint(&mut status, 3 << 3);
        put_varint(&mut status, 2);
        let mut span = Vec::new();
        bytes_field(&mut span, 1, &[1; 16]);
        bytes_field(&mut span, 2, &[2; 8]);
        bytes_field(&mut span, 3, b"tracestate");
        bytes_field(&mut span, 5, b"GET /cart");
        put_varint(&mut span, 6 << 3);
        put_varint(&mut span, 2);
        put_varint(&mut span, 7 << 3 | 1);
        span.extend_from_slice(&10u64.to_le_bytes());
        put_varint(&mut span, 8 << 3 | 1);
        span.extend_from_slice(&25u64.to_le_bytes());
        bytes_field(&mut span, 9, &kv);
        bytes_field(&mut span, 15, &status);
        let mut attributes: Vec<&[u8]> = vec![b"stale"];
        let f = scan_span(&span, &mut attributes);
        assert_eq!(f.span_id, &[2; 8]);
        assert!(f.parent_span_id.is_empty());
        assert_eq!(f.name, b"GET /cart");
        assert_eq!((f.kind, f.start_unix_nano, f.end_unix_nano), (2, 10, 25));
        assert!(f.error);
        assert_eq!(attributes, vec![&kv[..]]);
        assert_eq!(
            key_value(attributes[0]),
            Some(("retries", Cow::from("-5"), ValueKind::Int))
        );
        // Truncated input: what was read before the cut is kept.
        let cut = scan_span(&span[..span.len() - 3], &mut attributes);
        assert_eq!(cut.name, b"GET /cart");
        assert!(!cut.error);
    }

    /// The fields as [`Fields`] reads them one by one: what the scan must
    /// give on any bytes.
    fn scan_by_fields<'a>(payload: &'a [u8], attributes: &mut Vec<&'a [u8]>) -> SpanFields<'a> {
        attributes.clear();
        let mut out = SpanFields::default();
        for (number, field) in fields(payload) {
            match (number, field) {
                (2, Field::Bytes(b)) => out.span_id = b,
                (4, Field::Bytes(b)) => out.parent_span_id = b,
                (5, Field::Bytes(b)) => out.name = b,
                (6, Field::Varint(v)) => {
                    out.kind = u8::try_from(v).unwrap_or(0);
                    out.kind_value = u32::try_from(v).unwrap_or(u32::MAX);
                }
                (7, Field::Fixed64(v)) => out.start_unix_nano = v,
                (8, Field::Fixed64(v)) => out.end_unix_nano = v,
                (9, Field::Bytes(b)) => attributes.push(b),
                (15, Field::Bytes(b)) => {
                    out.status = 0;
                    for f in fields(b) {
                        if let (3, Field::Varint(code)) = f {
                            out.status = u32::try_from(code).unwrap_or(u32::MAX);
                        }
                    }
                    out.error = out.status == 2;
                }
                _ => {}
            }
        }
        out
    }

    /// Spans of every field the scan reads or skips (each wire type, a
    /// field number of two bytes, a kind past 255, fields sent twice), cut
    /// short and with bytes changed at random: the scan reads what the
    /// fields one by one give.
    #[test]
    fn the_scan_reads_what_the_fields_one_by_one_give() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(43);
        let mut checked = 0;
        for _ in 0..2_000 {
            let mut span = Vec::new();
            for _ in 0..rng.random_range(0..14) {
                let number: u64 = match rng.random_range(0..4) {
                    0 => rng.random_range(1..=20),
                    1 => [2, 4, 5, 6, 7, 8, 9, 15][rng.random_range(0..8)],
                    2 => rng.random_range(16..300),
                    _ => rng.random_range(1..16),
                };
                match rng.random_range(0..5) {
                    0 => {
                        put_varint(&mut span, number << 3);
                        put_varint(&mut span, rng.random_range(0..1_000));
                    }
                    1 => {
                        put_varint(&mut span, number << 3 | 1);
                        span.extend_from_slice(&rng.random::<u64>().to_le_bytes());
                    }
                    2 => {
                        let mut b = vec![0u8; rng.random_range(0..12)];
                        rng.fill(&mut b[..]);
                        if number == 15 && rng.random_bool(0.5) {
                            b = vec![3 << 3, rng.random_range(0..4)];
                        }
                        bytes_field(&mut span, number, &b);
                    }
                    3 => {
                        put_varint(&mut span, number << 3 | 5);
                        span.extend_from_slice(&[7; 4]);
                    }
                    _ => put_varint(&mut span, number << 3 | rng.random_range(3..5)),
                }
            }
            let mut variants = vec![span.clone()];
            if !span.is_empty() {
                variants.push(span[..rng.random_range(0..span.len())].to_vec());
                let mut changed = span.clone();
                let at = rng.random_range(0..changed.len());
                changed[at] = rng.random();
                variants.push(changed);
            }
            for bytes in &variants {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let (got, want) = (scan_span(bytes, &mut a), scan_by_fields(bytes, &mut b));
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{bytes:?}");
                assert_eq!(a, b, "{bytes:?}");
                checked += 1;
            }
        }
        assert!(checked > 5_000);
    }

    /// A `KeyValue`'s key as a decoder takes it, written as encoders write
    /// it or not: the value first, the key twice (the last counts), a key
    /// of 128 bytes or more, a value past the end.
    #[test]
    fn a_key_values_key_is_the_last_one_sent() {
        let kv = |fields: &[(u64, &[u8])]| {
            let mut out = Vec::new();
            for &(n, b) in fields {
                bytes_field(&mut out, n, b);
            }
            out
        };
        let long = [b'k'; 130];
        for (bytes, key) in [
            (
                kv(&[(1, b"http.route"), (2, b"\x0a\x01/")]),
                Some(&b"http.route"[..]),
            ),
            (
                kv(&[(2, b"\x0a\x01/"), (1, b"http.route")]),
                Some(&b"http.route"[..]),
            ),
            (kv(&[(1, b"a"), (2, b""), (1, b"b")]), Some(&b"b"[..])),
            (kv(&[(1, b"a"), (1, b"b"), (2, b"")]), Some(&b"b"[..])),
            (kv(&[(1, &long[..]), (2, b"")]), Some(&long[..])),
            (kv(&[(2, b"")]), None),
        ] {
            assert_eq!(key_of(&bytes), key, "{bytes:?}");
        }
        // A value said to run past the end: the key as sent before it.
        assert_eq!(key_of(b"\x0a\x01a\x12\x05x"), Some(&b"a"[..]));
    }
}
