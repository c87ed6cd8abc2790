//! The OTLP request scanner: turns an encoded `ExportTraceServiceRequest` into
//! stored [`Span`]s without decoding it into owned prost types.
//!
//! Decoding a request into a prost tree costs about half a microsecond per span
//! and an allocation per attribute, and the tree would be re-encoded for storage
//! anyway. Instead each span's encoded bytes become its payload (a zero-copy
//! slice of the body), and the few fields the engine needs (trace and span IDs,
//! start and end times) are read off the wire.
//!
//! Storing bytes as received is only safe if they are valid, so the scanner
//! walks the whole structure of every message by its schema: each known field
//! must have the wire type the schema gives it, every string must be UTF-8,
//! `AnyValue`s may nest only [`MAX_ANY_VALUE_DEPTH`] deep, and unknown fields
//! are skipped (and kept, inside the payload). Whatever the scanner accepts,
//! a protobuf decoder accepts too.
//!
//! Two kinds of failure:
//! - a malformed request (bad wire format anywhere) fails as a whole with a
//!   [`ScanError`], and the output vector is left as it was;
//! - a well-formed span the server will not keep is rejected on its own and
//!   counted in [`ScanOutcome`], as OTLP's partial success expects: an
//!   unusable trace or span ID, no start time, or times the [`TimeRules`]
//!   refuse (ended before the retention window, or ahead of the server's
//!   clock by more than [`FUTURE_SLACK_NANOS`]).
//!
//! A span whose end is before its start is kept as sent; the engine counts it
//! as lasting no time (its `end_unix_nano` is its start), so retention,
//! search and time partitions see one consistent instant.
//!
//! `ResourceSpans` and `ScopeSpans` are each read twice: once for their
//! resource or scope and schema URL (which the encoding may place after the
//! spans), once for the spans. The first pass only skips over the spans, so it
//! costs one varint per span.

use std::{fmt::Write as _, ops::Range, sync::Arc};

use bytes::{Bytes, BytesMut};
use tracedb_lsm::{ScopeGroup, Span, SpanId, TraceId};
use tracedb_proto::time::Utc;

use crate::{
    error::{Malformed, MalformedKind, ScanError},
    wire::{Reader, WireType},
};

#[cfg(test)]
mod tests;

/// How deeply `AnyValue`s may nest (through `ArrayValue` and `KeyValueList`)
/// before a request is malformed. An attribute's own value is depth 1. The
/// limit keeps the scanner's recursion bounded and leaves decoders with a
/// nesting limit of 100 messages room to read any span we store, even inside
/// a `TracesData`.
pub const MAX_ANY_VALUE_DEPTH: usize = 32;

/// How many rejection reasons [`ScanOutcome::rejection_message`] spells out.
const MAX_REJECTION_REASONS: usize = 5;

/// How far ahead of the server's clock a span's start or end may be: clocks
/// of the machines that export drift, but a span an hour ahead is a bug, and
/// keeping it would hold its file back from retention for as long.
pub const FUTURE_SLACK_NANOS: u64 = 3_600 * 1_000_000_000;

/// Which span times the server keeps, fixed for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRules {
    /// Spans that end before this (Unix nanoseconds) are already past
    /// retention: the server would never return them. 0 keeps any age.
    pub expire_before: u64,
    /// Spans that start or end after this are refused as ahead of the clock.
    pub latest: u64,
}

impl TimeRules {
    /// No time refused but a missing start (for tools that scan stored data).
    pub const ANY: TimeRules = TimeRules {
        expire_before: 0,
        latest: u64::MAX,
    };

    /// The rules at `now` for a server whose retention window begins at
    /// `expire_before` (0 when retention is off).
    pub fn at(now_unix_nano: u64, expire_before: u64) -> Self {
        TimeRules {
            expire_before,
            latest: now_unix_nano.saturating_add(FUTURE_SLACK_NANOS),
        }
    }
}

/// What scanning one `ExportTraceServiceRequest` found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Spans appended to the output.
    pub accepted: u64,
    /// Well-formed spans left out: the sum of the counts below.
    pub rejected: u64,
    /// Of `rejected`: spans whose trace ID is not 16 bytes or is all zero.
    pub rejected_trace_id: u64,
    /// Of `rejected`: spans with a usable trace ID whose span ID is not 8 bytes
    /// or is all zero.
    pub rejected_span_id: u64,
    /// Of `rejected`: spans with usable IDs and no start time.
    pub rejected_no_start: u64,
    /// Of `rejected`: spans that ended before the retention window.
    pub rejected_expired: u64,
    /// Of `rejected`: spans starting or ending too far ahead of the clock.
    pub rejected_future: u64,
    /// Of `rejected`: spans that would take their trace past its tenant's
    /// largest trace (counted by ingest after the scan).
    pub rejected_too_large: u64,
    /// The first few reasons, human readable, for `partial_success.error_message`.
    pub rejection_message: String,
}

/// Scans an encoded `opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`.
///
/// Appends one [`Span`] per accepted span to `out`: its payload is a zero-copy
/// slice of `body` holding the span's encoded bytes, and its group is shared by
/// every span of the same `ScopeSpans` (the resource and scope in it are also
/// slices of `body`, unless the field was repeated and had to be merged).
///
/// Returns an error if the request is malformed anywhere: bad wire format at
/// any depth, a known field with the wrong wire type, invalid UTF-8 in a string
/// field, truncation, or `AnyValue`s nested too deeply. `out` is then left as
/// it was. Well-formed spans whose trace ID is not 16 bytes or all zero, whose
/// span ID is not 8 bytes or all zero, that have no start time, or whose
/// times `rules` refuse, are rejected one by one and counted.
pub fn scan_export_request(
    body: &Bytes,
    out: &mut Vec<Span>,
    rules: TimeRules,
) -> Result<ScanOutcome, ScanError> {
    let initial_len = out.len();
    let mut scanner = Scanner {
        body,
        out,
        rules,
        outcome: ScanOutcome::default(),
    };
    match scanner.request() {
        Ok(()) => {
            scanner.outcome.finish_message();
            Ok(scanner.outcome)
        }
        Err(error) => {
            out.truncate(initial_len);
            Err(error.finish())
        }
    }
}

struct Scanner<'a> {
    body: &'a Bytes,
    out: &'a mut Vec<Span>,
    rules: TimeRules,
    outcome: ScanOutcome,
}

/// The fields of one span the engine needs, as read off the wire.
struct SpanFields {
    trace_id: Range<usize>,
    span_id: Range<usize>,
    start: u64,
    end: u64,
}

/// Which repeated field of which message a span came from, for rejection reasons.
#[derive(Clone, Copy)]
struct SpanPosition {
    resource_spans: usize,
    scope_spans: usize,
    span: usize,
}

type Scan<T = ()> = Result<T, ScanError>;

impl Scanner<'_> {
    /// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }`
    fn request(&mut self) -> Scan {
        let body = self.body;
        let mut r = Reader::new(body);
        let mut index = 0;
        while let Some((field, wire_type)) = r.read_key()? {
            match field {
                1 => {
                    let range = r.len_field(field, wire_type)?;
                    self.resource_spans(r.sub(range), index)
                        .map_err(|e| e.within("resource_spans", Some(index)))?;
                    index += 1;
                }
                _ => r.skip(field, wire_type)?,
            }
        }
        Ok(())
    }

    /// `ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }`
    fn resource_spans(&mut self, r: Reader<'_>, rs_index: usize) -> Scan {
        let Some(envelope) = Envelope::scan(&r, resource_message, "resource")? else {
            return Ok(());
        };
        let resource = envelope.context.bytes(self.body, r.clone(), 1);
        let schema_url = self.body.slice(envelope.schema_url);
        for_each_field(r, 2, |child, _, index| {
            self.scope_spans(child, &resource, &schema_url, rs_index, index)
                .map_err(|e| e.within("scope_spans", Some(index)))
        })
    }

    /// `ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }`
    fn scope_spans(
        &mut self,
        r: Reader<'_>,
        resource: &Option<Bytes>,
        resource_schema_url: &Bytes,
        rs_index: usize,
        ss_index: usize,
    ) -> Scan {
        let Some(envelope) = Envelope::scan(&r, instrumentation_scope, "scope")? else {
            return Ok(());
        };
        let group = Arc::new(ScopeGroup {
            resource: resource.clone(),
            resource_schema_url: resource_schema_url.clone(),
            scope: envelope.context.bytes(self.body, r.clone(), 1),
            scope_schema_url: self.body.slice(envelope.schema_url),
        });
        self.out.reserve(envelope.children);
        for_each_field(r, 2, |child, range, index| {
            let fields = span(child).map_err(|e| e.within("spans", Some(index)))?;
            let position = SpanPosition {
                resource_spans: rs_index,
                scope_spans: ss_index,
                span: index,
            };
            self.admit(fields, range, &group, position);
            Ok(())
        })
    }

    /// Appends a well-formed span, or counts it as rejected if its IDs are
    /// unusable or the server would not keep it for its times.
    #[inline]
    fn admit(
        &mut self,
        fields: SpanFields,
        payload: Range<usize>,
        group: &Arc<ScopeGroup>,
        position: SpanPosition,
    ) {
        let trace_id = self
            .body
            .get(fields.trace_id.clone())
            .and_then(TraceId::from_slice);
        let span_id = self
            .body
            .get(fields.span_id.clone())
            .and_then(SpanId::from_slice);
        let (trace_id, span_id) = match (trace_id, span_id) {
            (Some(trace_id), Some(span_id)) if !trace_id.is_zero() && !span_id.is_zero() => {
                (trace_id, span_id)
            }
            (trace_id, span_id) => {
                let reason = if trace_id.is_none() {
                    Problem::Length("trace_id", 16, fields.trace_id.len())
                } else if trace_id.is_some_and(|id| id.is_zero()) {
                    Problem::Zero("trace_id")
                } else if span_id.is_none() {
                    Problem::Length("span_id", 8, fields.span_id.len())
                } else {
                    Problem::Zero("span_id")
                };
                return self.reject(position, reason);
            }
        };
        let start = fields.start;
        // An end before the start counts as no duration (the payload keeps both as sent).
        let end = fields.end.max(start);
        if start == 0 {
            return self.reject(position, Problem::NoStart);
        }
        if end < self.rules.expire_before {
            return self.reject(position, Problem::Expired { end });
        }
        if end > self.rules.latest {
            return self.reject(position, Problem::Future { end });
        }
        self.out.push(Span {
            trace_id,
            span_id,
            start_unix_nano: start,
            end_unix_nano: end,
            group: Arc::clone(group),
            payload: self.body.slice(payload),
        });
        self.outcome.accepted += 1;
    }

    #[cold]
    fn reject(&mut self, position: SpanPosition, problem: Problem) {
        let outcome = &mut self.outcome;
        outcome.rejected += 1;
        *match problem {
            Problem::Length("trace_id", ..) | Problem::Zero("trace_id") => {
                &mut outcome.rejected_trace_id
            }
            Problem::Length(..) | Problem::Zero(_) => &mut outcome.rejected_span_id,
            Problem::NoStart => &mut outcome.rejected_no_start,
            Problem::Expired { .. } => &mut outcome.rejected_expired,
            Problem::Future { .. } => &mut outcome.rejected_future,
        } += 1;
        if outcome.rejected > MAX_REJECTION_REASONS as u64 {
            return;
        }
        if !outcome.rejection_message.is_empty() {
            outcome.rejection_message.push_str("; ");
        }
        // Writing to a String cannot fail.
        let _ = write!(
            outcome.rejection_message,
            "resource_spans[{}].scope_spans[{}].spans[{}]: ",
            position.resource_spans, position.scope_spans, position.span
        );
        let message = &mut outcome.rejection_message;
        let _ = match problem {
            Problem::Length(field, expected, actual) => {
                write!(message, "{field} is {actual} bytes, expected {expected}")
            }
            Problem::Zero(field) => write!(message, "{field} is all zero"),
            Problem::NoStart => write!(message, "start_time_unix_nano is not set"),
            Problem::Expired { end } => write!(
                message,
                "ended at {}, before the retention window began at {} (the server's --retention); a longer retention keeps older spans",
                Utc::from_unix_nanos(end),
                Utc::from_unix_nanos(self.rules.expire_before)
            ),
            Problem::Future { end } => write!(
                message,
                "ends at {}, more than 1h ahead of the server's clock",
                Utc::from_unix_nanos(end)
            ),
        };
    }
}

impl ScanOutcome {
    /// Moves `spans` accepted spans to the rejected, as past their tenant's
    /// largest trace of `max` bytes, and says so in the message.
    pub fn leave_out_too_large(&mut self, spans: u64, max: u64) {
        self.accepted -= spans;
        self.rejected += spans;
        self.rejected_too_large += spans;
        if !self.rejection_message.is_empty() {
            self.rejection_message.push_str("; ");
        }
        let _ = write!(
            self.rejection_message,
            "{spans} span(s) left out: their trace would pass the tenant's largest trace of {max} bytes"
        );
    }

    /// Notes in the message how many rejections it does not spell out.
    fn finish_message(&mut self) {
        let unlisted = self.rejected.saturating_sub(MAX_REJECTION_REASONS as u64);
        if unlisted > 0 {
            let _ = write!(self.rejection_message, "; and {unlisted} more");
        }
    }
}

/// Why one well-formed span is not kept.
enum Problem {
    /// Field name, expected length, actual length.
    Length(&'static str, usize, usize),
    Zero(&'static str),
    NoStart,
    /// Its end (or start, if later) is before the retention window.
    Expired {
        end: u64,
    },
    /// Its end (or start, if later) is past [`TimeRules::latest`].
    Future {
        end: u64,
    },
}

/// What `ResourceSpans` and `ScopeSpans` share: a context message in field 1
/// (`Resource`, `InstrumentationScope`; checked here, possibly split over
/// several occurrences, which protobuf merges), repeated children in field 2,
/// a schema URL in field 3. The first of two passes: the context must be
/// known before any child is stored, and it may come after the children.
struct Envelope {
    context: Repeated,
    schema_url: Range<usize>,
    children: usize,
}

impl Envelope {
    /// `None` when there are no children (nothing to store).
    fn scan(
        r: &Reader<'_>,
        check_context: fn(Reader<'_>) -> Scan,
        context_name: &'static str,
    ) -> Scan<Option<Envelope>> {
        let mut envelope = Envelope {
            context: Repeated::default(),
            schema_url: 0..0,
            children: 0,
        };
        let mut r = r.clone();
        while let Some((field, wire_type)) = r.read_key()? {
            match field {
                1 => {
                    let range = r.len_field(field, wire_type)?;
                    check_context(r.sub(range.clone()))
                        .map_err(|e| e.within(context_name, None))?;
                    envelope.context.add(range);
                }
                2 => {
                    r.len_field(field, wire_type)?;
                    envelope.children += 1;
                }
                3 => envelope.schema_url = r.string_field(field, wire_type)?,
                _ => r.skip(field, wire_type)?,
            }
        }
        Ok((envelope.children > 0).then_some(envelope))
    }
}

/// Each occurrence of the length-delimited repeated field `wanted`, with its
/// byte range in the body and its index; other fields are skipped. For an
/// envelope's children (field 2), the second pass: everything else was
/// checked by [`Envelope::scan`].
fn for_each_field(
    mut r: Reader<'_>,
    wanted: u32,
    mut each: impl FnMut(Reader<'_>, Range<usize>, usize) -> Scan,
) -> Scan {
    let mut index = 0;
    while let Some((field, wire_type)) = r.read_key()? {
        if field == wanted {
            let range = r.len_field(field, wire_type)?;
            each(r.sub(range.clone()), range, index)?;
            index += 1;
        } else {
            r.skip(field, wire_type)?;
        }
    }
    Ok(())
}

/// A singular message field that may appear more than once. Protobuf merges
/// the occurrences, which is the same as concatenating their encodings, so
/// one occurrence stays a zero-copy slice and several are copied into one
/// buffer (once, not once per occurrence, to stay linear on hostile input).
#[derive(Default)]
struct Repeated {
    first: Option<Range<usize>>,
    count: usize,
    total_len: usize,
}

impl Repeated {
    fn add(&mut self, range: Range<usize>) {
        self.count += 1;
        self.total_len += range.len();
        self.first.get_or_insert(range);
    }

    /// The merged encoding; `parent` is the message holding the field, to be
    /// walked again (it was validated already) when there are several.
    fn bytes(&self, body: &Bytes, parent: Reader<'_>, field_number: u32) -> Option<Bytes> {
        let first = self.first.clone()?;
        if self.count == 1 {
            return Some(body.slice(first));
        }
        let mut merged = BytesMut::with_capacity(self.total_len);
        let mut r = parent;
        while let Ok(Some((field, wire_type))) = r.read_key() {
            if field == field_number && wire_type == WireType::Len {
                match r.len_field(field, wire_type) {
                    Ok(range) => merged.extend_from_slice(r.bytes(range)),
                    Err(_) => break,
                }
            } else if r.skip(field, wire_type).is_err() {
                break;
            }
        }
        Some(merged.freeze())
    }
}

/// `Span`: reads the IDs and times and checks everything else.
fn span(mut r: Reader<'_>) -> Scan<SpanFields> {
    let mut fields = SpanFields {
        trace_id: 0..0,
        span_id: 0..0,
        start: 0,
        end: 0,
    };
    let (mut attributes, mut events, mut links) = (0, 0, 0);
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 => fields.trace_id = r.len_field(field, wire_type)?,
            2 => fields.span_id = r.len_field(field, wire_type)?,
            3 | 5 => {
                r.string_field(field, wire_type)?;
            }
            4 => {
                r.len_field(field, wire_type)?;
            }
            6 | 10 | 12 | 14 => {
                r.varint_field(field, wire_type)?;
            }
            7 => fields.start = r.fixed64_field(field, wire_type)?,
            8 => fields.end = r.fixed64_field(field, wire_type)?,
            9 => attribute(&mut r, field, wire_type, &mut attributes)?,
            11 => {
                let range = r.len_field(field, wire_type)?;
                event(r.sub(range)).map_err(|e| e.within("events", Some(events)))?;
                events += 1;
            }
            13 => {
                let range = r.len_field(field, wire_type)?;
                link(r.sub(range)).map_err(|e| e.within("links", Some(links)))?;
                links += 1;
            }
            15 => {
                let range = r.len_field(field, wire_type)?;
                status(r.sub(range)).map_err(|e| e.within("status", None))?;
            }
            16 => {
                r.fixed32_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(fields)
}

/// Checks a repeated `KeyValue` field whose key was just read.
#[inline]
fn attribute(r: &mut Reader<'_>, field: u32, wire_type: WireType, index: &mut usize) -> Scan {
    let range = r.len_field(field, wire_type)?;
    key_value(r.sub(range), 1).map_err(|e| e.within("attributes", Some(*index)))?;
    *index += 1;
    Ok(())
}

/// `Span.Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }`
fn event(mut r: Reader<'_>) -> Scan {
    let mut attributes = 0;
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 => {
                r.fixed64_field(field, wire_type)?;
            }
            2 => {
                r.string_field(field, wire_type)?;
            }
            3 => attribute(&mut r, field, wire_type, &mut attributes)?,
            4 => {
                r.varint_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `Span.Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; uint32 dropped_attributes_count = 5; fixed32 flags = 6; }`
fn link(mut r: Reader<'_>) -> Scan {
    let mut attributes = 0;
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 | 2 => {
                r.len_field(field, wire_type)?;
            }
            3 => {
                r.string_field(field, wire_type)?;
            }
            4 => attribute(&mut r, field, wire_type, &mut attributes)?,
            5 => {
                r.varint_field(field, wire_type)?;
            }
            6 => {
                r.fixed32_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `Status { string message = 2; StatusCode code = 3; }` (field 1 is reserved).
fn status(mut r: Reader<'_>) -> Scan {
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            2 => {
                r.string_field(field, wire_type)?;
            }
            3 => {
                r.varint_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; repeated EntityRef entity_refs = 3; }`
fn resource_message(mut r: Reader<'_>) -> Scan {
    let (mut attributes, mut entity_refs) = (0, 0);
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 => attribute(&mut r, field, wire_type, &mut attributes)?,
            2 => {
                r.varint_field(field, wire_type)?;
            }
            3 => {
                let range = r.len_field(field, wire_type)?;
                entity_ref(r.sub(range)).map_err(|e| e.within("entity_refs", Some(entity_refs)))?;
                entity_refs += 1;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `EntityRef { string schema_url = 1; string type = 2; repeated string id_keys = 3; repeated string description_keys = 4; }`
fn entity_ref(mut r: Reader<'_>) -> Scan {
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1..=4 => {
                r.string_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4; }`
fn instrumentation_scope(mut r: Reader<'_>) -> Scan {
    let mut attributes = 0;
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 | 2 => {
                r.string_field(field, wire_type)?;
            }
            3 => attribute(&mut r, field, wire_type, &mut attributes)?,
            4 => {
                r.varint_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `KeyValue { string key = 1; AnyValue value = 2; }`; `depth` is the depth
/// its value would have.
fn key_value(mut r: Reader<'_>, depth: usize) -> Scan {
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 => {
                r.string_field(field, wire_type)?;
            }
            2 => {
                let range = r.len_field(field, wire_type)?;
                any_value(r.sub(range), depth).map_err(|e| e.within("value", None))?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `AnyValue { oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3;
/// double double_value = 4; ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7; } }`
fn any_value(mut r: Reader<'_>, depth: usize) -> Scan {
    if depth > MAX_ANY_VALUE_DEPTH {
        return Err(Malformed {
            kind: MalformedKind::NestingTooDeep {
                limit: MAX_ANY_VALUE_DEPTH,
            },
            offset: r.position(),
        }
        .into());
    }
    while let Some((field, wire_type)) = r.read_key()? {
        match field {
            1 => {
                r.string_field(field, wire_type)?;
            }
            2 | 3 => {
                r.varint_field(field, wire_type)?;
            }
            4 => {
                r.fixed64_field(field, wire_type)?;
            }
            5 => {
                let range = r.len_field(field, wire_type)?;
                array_value(r.sub(range), depth).map_err(|e| e.within("array_value", None))?;
            }
            6 => {
                let range = r.len_field(field, wire_type)?;
                kvlist_value(r.sub(range), depth).map_err(|e| e.within("kvlist_value", None))?;
            }
            7 => {
                r.len_field(field, wire_type)?;
            }
            _ => r.skip(field, wire_type)?,
        }
    }
    Ok(())
}

/// `ArrayValue { repeated AnyValue values = 1; }` inside an `AnyValue` at `depth`.
fn array_value(r: Reader<'_>, depth: usize) -> Scan {
    for_each_field(r, 1, |value, _, index| {
        any_value(value, depth + 1).map_err(|e| e.within("values", Some(index)))
    })
}

/// `KeyValueList { repeated KeyValue values = 1; }` inside an `AnyValue` at `depth`.
fn kvlist_value(r: Reader<'_>, depth: usize) -> Scan {
    for_each_field(r, 1, |kv, _, index| {
        key_value(kv, depth + 1).map_err(|e| e.within("values", Some(index)))
    })
}
