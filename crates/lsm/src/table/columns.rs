//! The columnar span batch: how data blocks of version-2 sorted files hold
//! their spans before compression.
//!
//! A row batch ([`crate::batch`]) stores each span's trace ID, span ID and
//! times next to its payload, and the payload, the span's OTLP encoding,
//! holds the same 56 bytes again. Here each field gets a column of its own
//! (trace IDs once per trace, start times as deltas, durations, span IDs),
//! and a payload that begins with its trace and span IDs, and holds its two
//! times as consecutive fields, is stored without those bytes: the decoder
//! puts them back from the columns, byte for byte. zstd then finds the
//! repeats of each column among its neighbours. On telemetrygen spans a
//! block shrank from 36 to 18 bytes per span.
//!
//! The layout is in `docs/FORMAT.md` ("Columnar span batch").

use bytes::Bytes;

use super::{BlockFacts, KeepSpan};
use crate::{
    batch::{decode_groups, encode_groups, put_varint, BatchError, Reader},
    span::{Span, SpanId, TraceId},
};

/// Bytes of the `trace_id` and `span_id` fields at the head of a payload:
/// tag, length and value of each.
const IDS_LEN: usize = 2 + 16 + 2 + 8;

/// Bytes of the `start_time_unix_nano` and `end_time_unix_nano` fields: tag
/// and fixed64 value of each.
const TIMES_LEN: usize = 2 * (1 + 8);

/// Tags (field number << 3 | wire type) of the fields taken out.
const TAG_TRACE_ID: u8 = 1 << 3 | 2;
const TAG_SPAN_ID: u8 = 2 << 3 | 2;
const TAG_START: u8 = 7 << 3 | 1;
const TAG_END: u8 = 8 << 3 | 1;

/// How a payload is stored, the "payload form" column: the payload as is;
/// without its leading IDs; or without its IDs and with its times taken
/// out at an offset (the value minus [`FORM_TIMES`]).
const FORM_VERBATIM: u64 = 0;
const FORM_IDS: u64 = 1;
const FORM_TIMES: u64 = 2;

/// Appends the columnar encoding of `spans` (in trace-ID order, so spans of
/// one trace are adjacent) to `out`.
pub(crate) fn encode_columns(spans: &[Span], out: &mut Vec<u8>) {
    let groups = encode_groups(spans, out);
    put_varint(out, spans.len() as u64);

    let mut runs: Vec<(TraceId, u64)> = Vec::new();
    for span in spans {
        match runs.last_mut() {
            Some((id, n)) if *id == span.trace_id => *n += 1,
            _ => runs.push((span.trace_id, 1)),
        }
    }
    put_varint(out, runs.len() as u64);
    for (id, _) in &runs {
        out.extend_from_slice(&id.0);
    }
    for (_, n) in &runs {
        put_varint(out, *n);
    }
    for span in spans {
        out.extend_from_slice(&span.span_id.0);
    }

    let base = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
    out.extend_from_slice(&base.to_le_bytes());
    let mut previous = base;
    for span in spans {
        put_varint(out, zigzag(span.start_unix_nano.wrapping_sub(previous)));
        previous = span.start_unix_nano;
    }
    for span in spans {
        put_varint(
            out,
            zigzag(span.end_unix_nano.wrapping_sub(span.start_unix_nano)),
        );
    }
    for group in groups {
        put_varint(out, u64::from(group));
    }

    let stored: Vec<Stored<'_>> = spans.iter().map(strip).collect();
    for s in &stored {
        put_varint(out, s.form);
    }
    for s in &stored {
        put_varint(out, (s.head.len() + s.tail.len()) as u64);
    }
    for s in &stored {
        out.extend_from_slice(s.head);
        out.extend_from_slice(s.tail);
    }
}

/// A payload as stored: `head` then `tail`, in the given form.
struct Stored<'a> {
    form: u64,
    head: &'a [u8],
    tail: &'a [u8],
}

/// Takes out of `span`'s payload what the columns already hold, when the
/// decoder can put it back exactly; otherwise keeps the payload whole.
fn strip(span: &Span) -> Stored<'_> {
    let p = &span.payload[..];
    let verbatim = Stored {
        form: FORM_VERBATIM,
        head: p,
        tail: &[],
    };
    if p.len() < IDS_LEN || p[..IDS_LEN] != ids_prefix(span.trace_id, span.span_id) {
        return verbatim;
    }
    let rest = &p[IDS_LEN..];
    match find_times(rest, span.start_unix_nano, span.end_unix_nano) {
        Some(at) => Stored {
            form: FORM_TIMES + at as u64,
            head: &rest[..at],
            tail: &rest[at + TIMES_LEN..],
        },
        None => Stored {
            form: FORM_IDS,
            head: rest,
            tail: &[],
        },
    }
}

fn ids_prefix(trace_id: TraceId, span_id: SpanId) -> [u8; IDS_LEN] {
    let mut out = [0u8; IDS_LEN];
    out[0] = TAG_TRACE_ID;
    out[1] = 16;
    out[2..18].copy_from_slice(&trace_id.0);
    out[18] = TAG_SPAN_ID;
    out[19] = 8;
    out[20..28].copy_from_slice(&span_id.0);
    out
}

fn times_fields(start: u64, end: u64) -> [u8; TIMES_LEN] {
    let mut out = [0u8; TIMES_LEN];
    out[0] = TAG_START;
    out[1..9].copy_from_slice(&start.to_le_bytes());
    out[9] = TAG_END;
    out[10..18].copy_from_slice(&end.to_le_bytes());
    out
}

/// Offset in `fields` (encoded protobuf fields) of a start-time field
/// followed at once by an end-time field with these values, found by walking
/// the fields; `None` when there is none or the bytes do not parse.
fn find_times(fields: &[u8], start: u64, end: u64) -> Option<usize> {
    let wanted = times_fields(start, end);
    let mut at = 0;
    while at < fields.len() {
        let (key, key_len) = wire_varint(&fields[at..])?;
        if key == u64::from(TAG_START) && key_len == 1 {
            let candidate = fields.get(at..at + TIMES_LEN)?;
            return (candidate == wanted).then_some(at);
        }
        let value_at = at + key_len;
        let value_len = match key & 7 {
            0 => wire_varint(&fields[value_at..])?.1,
            1 => 8,
            2 => {
                let (n, n_len) = wire_varint(&fields[value_at..])?;
                n_len.checked_add(usize::try_from(n).ok()?)?
            }
            5 => 4,
            _ => return None,
        };
        at = value_at.checked_add(value_len)?;
    }
    None
}

/// A protobuf varint at the start of `b`, and its length.
fn wire_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

fn zigzag(delta: u64) -> u64 {
    let d = delta as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> u64 {
    ((v >> 1) as i64 ^ -((v & 1) as i64)) as u64
}

/// Least bytes a span takes: span ID, then one byte each for its start,
/// duration, group, payload form and payload length.
const SPAN_MIN: usize = 8 + 5;

/// Decodes a whole columnar batch; every byte of `buf` must belong to it.
/// The payloads are rebuilt into one new buffer the spans share.
#[cfg(test)]
pub(crate) fn decode_columns(buf: &Bytes) -> Result<Vec<Span>, BatchError> {
    decode_columns_where(buf, None).map(|(spans, _)| spans)
}

/// [`decode_columns`] of only the spans `keep` accepts (all when `None`),
/// given each span's payload as stored (without the IDs and times the
/// columns hold) and its resource: the others' payloads are not put back
/// together. With what the batch holds whole, from its columns.
pub(crate) fn decode_columns_where(
    buf: &Bytes,
    keep: Option<&KeepSpan>,
) -> Result<(Vec<Span>, BlockFacts), BatchError> {
    let mut r = Reader::new(buf);
    let groups = decode_groups(&mut r)?;
    let n = r.count(SPAN_MIN)?;
    let n_traces = r.count(16 + 1)?;
    if n_traces > n || (n > 0 && n_traces == 0) {
        return Err(BatchError::Inconsistent {
            span: 0,
            what: "more traces than spans, or spans without a trace",
        });
    }
    let trace_ids = r.take(16 * n_traces)?.to_vec();
    let mut trace_of = Vec::with_capacity(n);
    for t in 0..n_traces {
        let run = r.varint()?;
        let fits = usize::try_from(run)
            .ok()
            .filter(|&run| run > 0 && run <= n - trace_of.len());
        let Some(run) = fits else {
            return Err(BatchError::Inconsistent {
                span: trace_of.len(),
                what: "a trace's span count is zero or runs past the last span",
            });
        };
        trace_of.extend(std::iter::repeat_n(t, run));
    }
    if trace_of.len() != n {
        return Err(BatchError::Inconsistent {
            span: trace_of.len(),
            what: "the traces' span counts do not add up to the span count",
        });
    }
    let span_ids = r.take(8 * n)?.to_vec();
    let base = u64::from_le_bytes(r.take(8)?.try_into().expect("8-byte slice"));
    let mut starts = Vec::with_capacity(n);
    let mut previous = base;
    for _ in 0..n {
        previous = previous.wrapping_add(unzigzag(r.varint()?));
        starts.push(previous);
    }
    let mut ends = Vec::with_capacity(n);
    for &start in &starts {
        ends.push(start.wrapping_add(unzigzag(r.varint()?)));
    }
    let mut group_of = Vec::with_capacity(n);
    for span in 0..n {
        let g = r.varint()?;
        let group = usize::try_from(g)
            .ok()
            .filter(|&g| g < groups.len())
            .ok_or(BatchError::BadGroup {
                span,
                group: g,
                groups: groups.len(),
            })?;
        group_of.push(group);
    }
    let mut forms = Vec::with_capacity(n);
    for _ in 0..n {
        forms.push(r.varint()?);
    }
    let mut lens = Vec::with_capacity(n);
    let mut stored_total = 0usize;
    let mut rebuilt_total = 0usize;
    for (span, &form) in forms.iter().enumerate() {
        let len = r.varint()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= r.remaining().saturating_sub(stored_total))
            .ok_or(BatchError::Truncated(buf.len()))?;
        let extra = match form {
            FORM_VERBATIM => 0,
            FORM_IDS => IDS_LEN,
            f if f - FORM_TIMES <= len as u64 => IDS_LEN + TIMES_LEN,
            _ => {
                return Err(BatchError::Inconsistent {
                    span,
                    what: "payload form places the times past the payload's end",
                })
            }
        };
        stored_total += len;
        rebuilt_total += len + extra;
        lens.push(len);
    }
    match r.remaining().cmp(&stored_total) {
        std::cmp::Ordering::Less => return Err(BatchError::Truncated(buf.len())),
        std::cmp::Ordering::Greater => {
            return Err(BatchError::Trailing(r.remaining() - stored_total))
        }
        std::cmp::Ordering::Equal => {}
    }

    let facts = BlockFacts {
        spans: n,
        first_trace_id: (n > 0).then(|| trace_id_at(&trace_ids, 0)),
        last_trace_id: (n > 0).then(|| trace_id_at(&trace_ids, n_traces - 1)),
        min_start: starts.iter().copied().min(),
        max_start: starts.iter().copied().max(),
        sorted: trace_ids.chunks_exact(16).is_sorted(),
    };
    let mut payloads = Vec::with_capacity(if keep.is_none() { rebuilt_total } else { 0 });
    // Per span kept, its place in the columns and its payload's bounds.
    let mut bounds = Vec::with_capacity(if keep.is_none() { n } else { 0 });
    for i in 0..n {
        let stored = r.take(lens[i])?;
        let trace_id = trace_id_at(&trace_ids, trace_of[i]);
        if keep
            .is_some_and(|keep| !keep(&trace_id, stored, groups[group_of[i]].resource.as_deref()))
        {
            continue;
        }
        let span_id = SpanId(span_ids[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let from = payloads.len();
        match forms[i] {
            FORM_VERBATIM => payloads.extend_from_slice(stored),
            FORM_IDS => {
                payloads.extend_from_slice(&ids_prefix(trace_id, span_id));
                payloads.extend_from_slice(stored);
            }
            form => {
                let at = (form - FORM_TIMES) as usize;
                payloads.extend_from_slice(&ids_prefix(trace_id, span_id));
                payloads.extend_from_slice(&stored[..at]);
                payloads.extend_from_slice(&times_fields(starts[i], ends[i]));
                payloads.extend_from_slice(&stored[at..]);
            }
        }
        bounds.push((i, from, payloads.len()));
    }
    let payloads = Bytes::from(payloads);
    let spans = bounds
        .into_iter()
        .map(|(i, from, to)| Span {
            trace_id: trace_id_at(&trace_ids, trace_of[i]),
            span_id: SpanId(span_ids[8 * i..8 * i + 8].try_into().expect("8 bytes")),
            start_unix_nano: starts[i],
            end_unix_nano: ends[i],
            group: groups[group_of[i]].clone(),
            payload: payloads.slice(from..to),
        })
        .collect();
    Ok((spans, facts))
}

fn trace_id_at(ids: &[u8], t: usize) -> TraceId {
    TraceId(ids[16 * t..16 * t + 16].try_into().expect("16 bytes"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::{rngs::SmallRng, Rng, SeedableRng};

    use super::*;
    use crate::{batch::encode_batch, span::ScopeGroup, test_util::group};

    /// Appends a length-delimited field.
    fn field(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
        out.push(tag);
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }

    /// A span's payload as the OpenTelemetry SDKs encode it: fields in
    /// number order, parent, name, kind, times, an attribute, a status.
    fn otlp_payload(trace: TraceId, span: SpanId, start: u64, end: u64, name: &str) -> Vec<u8> {
        let mut p = Vec::new();
        field(&mut p, TAG_TRACE_ID, &trace.0);
        field(&mut p, TAG_SPAN_ID, &span.0);
        field(&mut p, 4 << 3 | 2, &[7; 8]);
        field(&mut p, 5 << 3 | 2, name.as_bytes());
        p.extend_from_slice(&[6 << 3, 2]);
        p.push(TAG_START);
        p.extend_from_slice(&start.to_le_bytes());
        p.push(TAG_END);
        p.extend_from_slice(&end.to_le_bytes());
        let mut value = Vec::new();
        field(&mut value, 1 << 3 | 2, b"GET /cart");
        let mut kv = Vec::new();
        field(&mut kv, 1 << 3 | 2, b"http.route");
        field(&mut kv, 2 << 3 | 2, &value);
        field(&mut p, 9 << 3 | 2, &kv);
        field(&mut p, 15 << 3 | 2, &[3 << 3, 2]);
        p
    }

    fn span_with(
        g: &Arc<ScopeGroup>,
        trace: u128,
        span: u64,
        start: u64,
        end: u64,
        payload: Vec<u8>,
    ) -> Span {
        Span {
            trace_id: TraceId(trace.to_be_bytes()),
            span_id: SpanId(span.to_be_bytes()),
            start_unix_nano: start,
            end_unix_nano: end,
            group: g.clone(),
            payload: Bytes::from(payload),
        }
    }

    fn otlp_span(g: &Arc<ScopeGroup>, trace: u128, span: u64, start: u64, end: u64) -> Span {
        let p = otlp_payload(
            TraceId(trace.to_be_bytes()),
            SpanId(span.to_be_bytes()),
            start,
            end,
            "checkout",
        );
        span_with(g, trace, span, start, end, p)
    }

    fn encode(spans: &[Span]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_columns(spans, &mut out);
        out
    }

    fn assert_round_trip(spans: &[Span]) -> Vec<u8> {
        let buf = encode(spans);
        let back = decode_columns(&Bytes::from(buf.clone())).expect("decodes");
        assert_eq!(back.len(), spans.len());
        for (i, (a, b)) in spans.iter().zip(&back).enumerate() {
            assert_eq!(a.trace_id, b.trace_id, "span {i}");
            assert_eq!(a.span_id, b.span_id, "span {i}");
            assert_eq!(a.start_unix_nano, b.start_unix_nano, "span {i}");
            assert_eq!(a.end_unix_nano, b.end_unix_nano, "span {i}");
            assert_eq!(a.payload, b.payload, "span {i}: payload bytes");
            assert_eq!(*a.group, *b.group, "span {i}");
        }
        buf
    }

    #[test]
    fn sdk_encoded_spans_are_stored_without_ids_and_times_and_come_back_byte_for_byte() {
        let g = group("svc");
        let spans: Vec<Span> = (0..100u64)
            .map(|i| {
                otlp_span(
                    &g,
                    1 + u128::from(i / 5),
                    i,
                    1_700_000_000_000_000_000 + i * 977,
                    1_700_000_000_000_000_000 + i * 977 + 250_000,
                )
            })
            .collect();
        for s in &spans {
            assert!(
                strip(s).form >= FORM_TIMES,
                "the times are found and taken out"
            );
        }
        let columns = assert_round_trip(&spans);
        let mut rows = Vec::new();
        encode_batch(&spans, &mut rows);
        // Rows carry 40 bytes of key fields plus the payload's own 46 bytes
        // of IDs and times (with tags); columns keep those once, packed.
        assert!(
            columns.len() + 40 * spans.len() < rows.len(),
            "columns {} bytes, rows {} bytes",
            columns.len(),
            rows.len()
        );
    }

    /// A read that keeps some spans: it is given each span's payload as
    /// stored and its resource, hands on exactly the spans it keeps as a
    /// whole decode gives them, and tells what the batch holds whole.
    #[test]
    fn a_read_keeps_the_spans_it_is_told_to_as_a_whole_decode_gives_them() {
        let (ga, gb) = (group("svc-a"), group("svc-b"));
        let mut spans = Vec::new();
        for i in 0..120u64 {
            let (trace, g) = (1 + u128::from(i / 7), if i % 3 == 0 { &gb } else { &ga });
            let (start, end) = (
                1_700_000_000_000_000_000 + i * 977,
                1_700_000_000_000_001_000 + i,
            );
            let name = if i % 4 == 0 { "keep-me" } else { "other" };
            let payload = if i % 5 == 0 {
                format!("verbatim {name}").into_bytes()
            } else {
                otlp_payload(
                    TraceId(trace.to_be_bytes()),
                    SpanId(i.to_be_bytes()),
                    start,
                    end,
                    name,
                )
            };
            spans.push(span_with(g, trace, i, start, end, payload));
        }
        let buf = Bytes::from(encode(&spans));
        fn holds(bytes: &[u8], what: &[u8]) -> bool {
            bytes.windows(what.len()).any(|w| w == what)
        }
        fn wanted(payload: &[u8], resource: Option<&[u8]>) -> bool {
            holds(payload, b"keep-me") && resource.is_some_and(|r| holds(r, b"svc-a"))
        }
        let seen = Arc::new(std::sync::Mutex::new(0usize));
        let counter = seen.clone();
        let keep = move |_: &TraceId, payload: &[u8], resource: Option<&[u8]>| {
            *counter.lock().expect("lock") += payload.len();
            wanted(payload, resource)
        };
        let (kept, facts) = decode_columns_where(&buf, Some(&keep)).expect("decodes");
        let want: Vec<&Span> = spans
            .iter()
            .filter(|s| wanted(&s.payload, s.group.resource.as_deref()))
            .collect();
        assert!(!want.is_empty() && want.len() < spans.len());
        assert_eq!(kept.len(), want.len());
        for (a, b) in kept.iter().zip(&want) {
            assert_eq!((a.trace_id, a.span_id), (b.trace_id, b.span_id));
            assert_eq!(
                (a.start_unix_nano, a.end_unix_nano),
                (b.start_unix_nano, b.end_unix_nano)
            );
            assert_eq!(a.payload, b.payload, "payload put back together");
            assert_eq!(*a.group, *b.group);
        }
        assert_eq!(facts, BlockFacts::of(&spans));
        // The payloads as stored: without the IDs and times of the SDK's.
        let stored: usize = spans
            .iter()
            .map(|s| {
                s.payload.len()
                    - if s.payload.starts_with(b"verbatim") {
                        0
                    } else {
                        IDS_LEN + TIMES_LEN
                    }
            })
            .sum();
        assert_eq!(*seen.lock().expect("lock"), stored);
    }

    #[test]
    fn payloads_the_decoder_could_not_rebuild_exactly_are_kept_whole() {
        let g = group("svc");
        let (t, s) = (TraceId(5u128.to_be_bytes()), SpanId(9u64.to_be_bytes()));
        let canonical = otlp_payload(t, s, 100, 200, "op");
        let mut cases: Vec<(&str, Span, u64)> = Vec::new();
        let mut push = |name, payload: Vec<u8>, start, end, form| {
            cases.push((name, span_with(&g, 5, 9, start, end, payload), form));
        };
        push("canonical", canonical.clone(), 100, 200, FORM_TIMES + 16);
        push(
            "times differ from the key fields",
            canonical.clone(),
            100,
            201,
            FORM_IDS,
        );
        push(
            "no times (zero times are not encoded)",
            canonical[..IDS_LEN].to_vec(),
            0,
            0,
            FORM_IDS,
        );
        let mut swapped = canonical.clone();
        swapped[..10].copy_from_slice(&[TAG_SPAN_ID, 8, 0, 0, 0, 0, 0, 0, 0, 9]);
        push("span ID first", swapped, 100, 200, FORM_VERBATIM);
        let mut other_trace = canonical.clone();
        other_trace[17] ^= 1;
        push("another trace ID", other_trace, 100, 200, FORM_VERBATIM);
        push("empty", Vec::new(), 100, 200, FORM_VERBATIM);
        push("not protobuf", vec![0xff; 40], 100, 200, FORM_VERBATIM);
        let mut truncated = canonical.clone();
        truncated.truncate(IDS_LEN + 3);
        push("fields cut short", truncated, 100, 200, FORM_IDS);
        let mut long_key = canonical[..IDS_LEN].to_vec();
        long_key.extend_from_slice(&[TAG_START | 0x80, 0]);
        long_key.extend_from_slice(&100u64.to_le_bytes());
        long_key.push(TAG_END);
        long_key.extend_from_slice(&200u64.to_le_bytes());
        push("start tag in two bytes", long_key, 100, 200, FORM_IDS);
        let mut no_end = canonical.clone();
        no_end.truncate(IDS_LEN + 16 + 9);
        push("start without end", no_end, 100, 200, FORM_IDS);
        let mut bad_group_bytes = canonical.clone();
        bad_group_bytes.extend_from_slice(&[3 << 3 | 3]);
        push(
            "group wire type after the times",
            bad_group_bytes,
            100,
            200,
            FORM_TIMES + 16,
        );
        for (name, span, form) in &cases {
            assert_eq!(strip(span).form, *form, "{name}");
        }
        let spans: Vec<Span> = cases.into_iter().map(|(_, s, _)| s).collect();
        assert_round_trip(&spans);
    }

    #[test]
    fn any_times_and_ids_round_trip() {
        let g1 = group("a");
        let g2 = Arc::new(ScopeGroup::default());
        let mut rng = SmallRng::seed_from_u64(7);
        let extremes = [
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            1_700_000_000_000_000_000,
        ];
        let mut spans = Vec::new();
        let mut trace = 0u128;
        for _ in 0..2_000 {
            if rng.random_bool(0.3) {
                trace += 1 + u128::from(rng.random::<u32>());
            }
            let start = if rng.random_bool(0.2) {
                extremes[rng.random_range(0..extremes.len())]
            } else {
                rng.random()
            };
            let end = if rng.random_bool(0.2) {
                extremes[rng.random_range(0..extremes.len())]
            } else {
                start.wrapping_add(rng.random_range(0..1_000_000))
            };
            let g = if rng.random_bool(0.5) { &g1 } else { &g2 };
            let mut s = otlp_span(g, trace, rng.random(), start, end);
            if rng.random_bool(0.2) {
                let cut = rng.random_range(0..s.payload.len());
                s.payload = s.payload.slice(..cut);
            }
            if rng.random_bool(0.1) {
                let mut p = s.payload.to_vec();
                if !p.is_empty() {
                    let at = rng.random_range(0..p.len());
                    p[at] ^= 1 << rng.random_range(0..8);
                }
                s.payload = Bytes::from(p);
            }
            spans.push(s);
        }
        assert_round_trip(&spans);
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        let g = group("svc");
        let spans: Vec<Span> = (0..6)
            .map(|i| otlp_span(&g, 1 + u128::from(i / 2), i, 10 * i, 10 * i + 5))
            .collect();
        let buf = encode(&spans);
        for len in 0..buf.len() {
            let cut = Bytes::copy_from_slice(&buf[..len]);
            assert!(
                decode_columns(&cut).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(matches!(
            decode_columns(&Bytes::from(longer)),
            Err(BatchError::Trailing(1))
        ));
    }

    #[test]
    fn flipped_bytes_are_errors_or_other_spans_never_panics() {
        let g = group("svc");
        let spans: Vec<Span> = (0..8)
            .map(|i| otlp_span(&g, 1 + u128::from(i / 3), i, 10 * i, 10 * i + 5))
            .collect();
        let buf = encode(&spans);
        let mut errors = 0;
        for i in 0..buf.len() {
            for bit in [0x01, 0x80, 0xff] {
                let mut bad = buf.clone();
                bad[i] ^= bit;
                errors += usize::from(decode_columns(&Bytes::from(bad)).is_err());
            }
        }
        assert!(errors > 0, "some flips must break the structure");
    }

    #[test]
    fn inconsistent_columns_are_refused() {
        let g = group("svc");
        let one = vec![otlp_span(&g, 1, 1, 100, 200)];
        let buf = encode(&one);
        // Layout after the group: span count 1, trace count 1, trace ID, run.
        let groups_len = {
            let mut out = Vec::new();
            encode_groups(&one, &mut out);
            out.len()
        };
        let run_at = groups_len + 2 + 16;
        assert_eq!(buf[run_at], 1, "the run of the only trace");
        let mut zero_run = buf.clone();
        zero_run[run_at] = 0;
        assert!(matches!(
            decode_columns(&Bytes::from(zero_run)),
            Err(BatchError::Inconsistent { .. })
        ));
        let mut no_traces = buf.clone();
        no_traces[groups_len + 1] = 0;
        assert!(decode_columns(&Bytes::from(no_traces)).is_err());
        // The form column: span ID (8), base (8), start delta, duration, group.
        let form_at = run_at + 1 + 8 + 8 + 1 + 2 + 1;
        // Times after parent (10 bytes), name "checkout" (10) and kind (2).
        assert_eq!(buf[form_at], (FORM_TIMES + 22) as u8);
        let mut far = buf.clone();
        far[form_at] = 0x7f;
        assert!(matches!(
            decode_columns(&Bytes::from(far)),
            Err(BatchError::Inconsistent { .. })
        ));
        let mut group = buf.clone();
        group[form_at - 1] = 1;
        assert!(matches!(
            decode_columns(&Bytes::from(group)),
            Err(BatchError::BadGroup { group: 1, .. })
        ));
    }
}
