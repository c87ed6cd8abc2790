//! The part of Grafana Tempo's HTTP API that Grafana's Tempo data source
//! uses, on tracedb's HTTP port:
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/echo` | `echo` |
//! | `GET /api/v2/traces/{id}` | `Accept: application/protobuf`: a message wire-compatible with Tempo's `TraceByIDResponse` (field 1 = the trace as OTLP `TracesData`); otherwise `{"trace": {"resourceSpans": [...]}}` (OTLP/JSON) |
//! | `GET /api/traces/{id}` | the trace alone: `TracesData` in protobuf, `{"batches": [...]}` in JSON |
//! | `GET /api/search` | `{"traces": [{traceID, rootServiceName, rootTraceName, startTimeUnixNano, durationMs, serviceStats: {service: {spanCount, errorCount}}, spanSets: [{spans: [{spanID, name, startTimeUnixNano, durationNanos, attributes}], matched}]}], "metrics": {...}}` |
//! | `GET /api/v2/search/tags`, `/api/search/tags` | tag names (by scope in v2) |
//! | `GET /api/v2/search/tag/{tag}/values`, `/api/search/tag/{tag}/values` | tag values |
//! | `GET /api/metrics/query_range`, `/api/metrics/query` | TraceQL metrics: `{"series": [{labels, samples, exemplars}], "metrics", "status", "message"}` (`metrics`) |
//!
//! Trace IDs are 1 to 32 hex digits (left-padded with zeros); anything else
//! is 400, an ID with no stored span 404, a trace no span of which can be
//! read (damaged files) 500. A trace answered without the spans of damaged
//! files carries the headers `tracedb-partial: true` and
//! `tracedb-partial-reason` ([`crate::read`]). `start` and `end` (Unix seconds)
//! are hints for trace lookups and bounds for search and tags. Search reads
//! only the search index. Of TraceQL (`q`), the subset Grafana's search
//! builder writes is understood; anything else is 400.

use std::{collections::HashMap, sync::Arc};

use axum::{
    extract::{FromRequestParts, Path, Query},
    http::{header, request::Parts, HeaderMap},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use bytes::{BufMut, Bytes, BytesMut};
use prost::Message as _;
use serde_json::{json, Value};
use tracedb_lsm::{index::TagScope, TimeRange, TraceId};
use tracedb_proto::{start::StartCell, tenant::Tenants, trace::v1::TracesData};
use tracedb_traceql::{
    ast::{CmpOp, FieldExpr, Intrinsic, Query as TraceQl},
    Compiled,
};

use crate::{
    error::{Error, Result},
    otlp_json,
    read::{self, Answer, Reads, TagKeys},
    search::{legacy, Field, MatchedSpanset, Search},
    service::{header_value, PARTIAL_HEADER, PARTIAL_REASON_HEADER},
    tenants::ReadsFor,
};

/// The stores' reads, once they can be answered (the router is mounted
/// before storage is open; until then every route but `/api/echo` is 503).
pub type ReadsCell = StartCell<Arc<dyn ReadsFor>>;

mod metrics;

const PROTOBUF: &str = "application/protobuf";
const SEC: u64 = 1_000_000_000;

/// The Tempo routes, to be merged into the server's HTTP router.
pub fn router(reads: ReadsCell) -> Router {
    Router::new()
        .route("/api/echo", get(|| async { "echo" }))
        .route("/api/v2/traces/{id}", get(trace_v2))
        .route("/api/traces/{id}", get(trace_v1))
        .route("/api/search", get(search))
        .route("/api/v2/search/tags", get(tags_v2))
        .route("/api/search/tags", get(tags_v1))
        .route("/api/v2/search/tag/{tag}/values", get(tag_values_v2))
        .route("/api/search/tag/{tag}/values", get(tag_values_v1))
        .route("/api/metrics/query_range", get(metrics::query_range))
        .route("/api/metrics/query", get(metrics::query_instant))
        .with_state(reads)
}

/// A request the API cannot take: 400 with the reason
/// ([`Error::http_status`] is the one mapping of errors to statuses).
fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// The reads of the tenants a request names (the [`Tenants`] the server's
/// tenancy layer put in its extensions); 503 until the stores are open.
struct Scoped(Arc<dyn Reads>);

impl FromRequestParts<ReadsCell> for Scoped {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, cell: &ReadsCell) -> Result<Self> {
        let reads = cell.get()?;
        Ok(Scoped(reads.reads(parts.extensions.get::<Tenants>())))
    }
}

/// A Tempo trace ID: 1 to 32 hex digits, left-padded.
pub fn parse_trace_id(s: &str) -> Option<TraceId> {
    if s.is_empty() || s.len() > 32 {
        return None;
    }
    format!("{s:0>32}").parse().ok()
}

/// `start`/`end` in Unix seconds (0 or absent = unbounded).
fn time_range(params: &HashMap<String, String>) -> Result<TimeRange> {
    let secs = |name: &str| -> Result<u64> {
        match params.get(name).map(String::as_str) {
            None | Some("") => Ok(0),
            Some(v) => v
                .parse::<u64>()
                .map(|s| s.saturating_mul(SEC))
                .map_err(|_| bad(format!("{name} must be Unix seconds, got {v:?}"))),
        }
    };
    let (start, end) = (secs("start")?, secs("end")?);
    if start != 0 && end != 0 && start > end {
        return Err(bad("start is after end"));
    }
    // `end` in seconds covers that whole second.
    Ok(TimeRange::new(
        start,
        if end == 0 { 0 } else { end + SEC - 1 },
    ))
}

fn wants_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(PROTOBUF) || v.contains("application/x-protobuf"))
}

/// `response` with the partial-answer headers when `partial` names a reason.
fn marked(mut response: Response, partial: &[String]) -> Response {
    if !partial.is_empty() {
        let headers = response.headers_mut();
        headers.insert(PARTIAL_HEADER, header::HeaderValue::from_static("true"));
        if let Ok(value) = header::HeaderValue::from_str(&header_value(&read::describe(partial))) {
            headers.insert(PARTIAL_REASON_HEADER, value);
        }
    }
    response
}

/// The value of an answer, and its reasons, noted when partial.
fn noted<T>(found: Answer<T>, what: &str) -> (T, Vec<String>) {
    if found.is_partial() {
        read::note_partial(read::Api::Tempo, &what, &found.partial);
    }
    (found.value, found.partial)
}

/// A trace as one encoded `TracesData`, and why it may be incomplete.
struct LoadedTrace {
    data: Bytes,
    partial: Vec<String>,
}

impl LoadedTrace {
    fn marked(&self, response: Response) -> Response {
        marked(response, &self.partial)
    }
}

/// The trace as one encoded `TracesData`; 404 when no span is stored, 500
/// when damaged files keep every span of it from being read.
async fn load_trace(
    reads: &Arc<dyn Reads>,
    id: &str,
    params: &HashMap<String, String>,
) -> Result<LoadedTrace> {
    let trace_id = parse_trace_id(id)
        .ok_or_else(|| bad(format!("trace ID must be 1 to 32 hex digits, got {id:?}")))?;
    let range = time_range(params)?;
    let found = reads.trace(trace_id, range).await?;
    if found.is_partial() {
        read::note_partial(read::Api::Tempo, &found.trace_id(), found.partial());
    }
    // One message: no size limit splits it.
    let data = found.encode(usize::MAX).concat().into();
    let (_, partial) = found.into_parts();
    Ok(LoadedTrace { data, partial })
}

fn decode(bytes: &Bytes) -> Result<TracesData> {
    TracesData::decode(bytes.clone()).map_err(|e| Error::Internal(e.to_string()))
}

fn protobuf(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, PROTOBUF)], body).into_response()
}

fn json_response(v: Value) -> Response {
    json_body(v.to_string())
}

/// A JSON answer written already.
fn json_body(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[tracing::instrument(skip_all)]
async fn trace_v2(
    Scoped(reads): Scoped,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response> {
    let trace = load_trace(&reads, &id, &params).await?;
    if wants_protobuf(&headers) {
        // TraceByIDResponse { Trace trace = 1; }: Trace is wire-identical to TracesData.
        let mut out = BytesMut::with_capacity(trace.data.len() + 11);
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(trace.data.len() as u64, &mut out);
        out.put(trace.data.clone());
        return Ok(trace.marked(protobuf(out.freeze())));
    }
    let data = decode(&trace.data)?;
    Ok(trace.marked(json_response(
        json!({ "trace": otlp_json::traces_data(&data) }),
    )))
}

#[tracing::instrument(skip_all)]
async fn trace_v1(
    Scoped(reads): Scoped,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response> {
    let trace = load_trace(&reads, &id, &params).await?;
    if wants_protobuf(&headers) {
        return Ok(trace.marked(protobuf(trace.data.clone())));
    }
    let data = decode(&trace.data)?;
    let batches: Vec<Value> = data
        .resource_spans
        .iter()
        .map(otlp_json::resource_spans)
        .collect();
    Ok(trace.marked(json_response(json!({ "batches": batches }))))
}

/// A Tempo duration: `300ms`, `1.5s`, `2m`, `100us`, `10ns`, `1h`.
pub fn parse_duration(s: &str) -> Option<u64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic() || c == 'µ')?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    (n >= 0.0).then_some((n * scale) as u64)
}

/// `key=value key2="value with spaces"` (logfmt, as Tempo's `tags`).
pub fn parse_logfmt(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        rest = &rest[eq + 1..];
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let close = quoted.find('"')?;
            value = quoted[..close].to_string();
            rest = &quoted[close + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value = rest[..end].to_string();
            rest = &rest[end..];
        }
        if key.is_empty() || key.contains(char::is_whitespace) {
            return None;
        }
        out.push((key, value));
        rest = rest.trim_start();
    }
    Some(out)
}

/// The legacy search parameters (`tags` as logfmt, `minDuration`,
/// `maxDuration`, and tracedb's `service` and `spanName`) as one spanset
/// filter: every tag on one span (`service.name` on its resource, `name` its
/// name, any other key its attribute or its resource's, a value that reads
/// as a number or a bool matching that type too), the trace's duration in
/// range. `None` when no parameter is given.
fn legacy_query(params: &HashMap<String, String>) -> Result<Option<TraceQl>> {
    let mut conds: Vec<FieldExpr> = Vec::new();
    let tags = params.get("tags").map(String::as_str).unwrap_or("");
    for (k, v) in parse_logfmt(tags).ok_or_else(|| bad(format!("tags is not logfmt: {tags:?}")))? {
        conds.push(match k.as_str() {
            "service.name" | "resource.service.name" => legacy::service(&v),
            "name" | "span.name" => legacy::span_name(&v),
            key => legacy::tag(key, &v),
        });
    }
    if let Some(s) = params.get("service").filter(|s| !s.is_empty()) {
        conds.push(legacy::service(s));
    }
    if let Some(s) = params.get("spanName").filter(|s| !s.is_empty()) {
        conds.push(legacy::span_name(s));
    }
    for (name, op) in [("minDuration", CmpOp::Ge), ("maxDuration", CmpOp::Le)] {
        if let Some(v) = params.get(name).filter(|v| !v.is_empty()) {
            let nanos =
                parse_duration(v).ok_or_else(|| bad(format!("{name}: bad duration {v:?}")))?;
            conds.push(legacy::duration(Intrinsic::TraceDuration, op, nanos));
        }
    }
    Ok(legacy::filter(conds))
}

/// A number parameter, `default` when absent, at most `max`.
fn count_param(
    params: &HashMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(default),
        Some(v) => Ok(v
            .parse::<usize>()
            .map_err(|_| bad(format!("{name} must be a number, got {v:?}")))?
            .clamp(1, max)),
    }
}

/// The tag-values `limit` parameter: 0 (or absent) for none, as in Tempo.
/// `maxStaleValues`, Tempo's hint to stop early, is accepted and not needed:
/// a block whose values are all known already is not read.
fn values_limit(params: &HashMap<String, String>) -> Result<usize> {
    match params.get("limit").map(String::as_str) {
        None | Some("") => Ok(0),
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| bad(format!("limit must be a number, got {v:?}"))),
    }
}

/// The search `params` ask for: TraceQL in `q`, or the legacy parameters.
fn search_request(params: &HashMap<String, String>) -> Result<Search> {
    let range = time_range(params)?;
    let text = params.get("q").map(|t| t.trim()).filter(|t| !t.is_empty());
    let legacy = legacy_query(params)?;
    let query = match (text, legacy) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "q (TraceQL) replaces tags, minDuration, maxDuration, service and spanName: write those conditions in q",
            ))
        }
        (Some(text), None) => crate::search::compile(text)?,
        (None, Some(q)) => Arc::new(
            Compiled::new(q).map_err(|e| Error::Internal(e.to_string()))?,
        ),
        (None, None) => crate::search::compile("{}")?,
    };
    Ok(Search {
        text: query.query.to_string(),
        query,
        start_unix_nano: range.start_unix_nano,
        end_unix_nano: range.end_unix_nano,
        // Over the most one search answers: the answer says so.
        limit: count_param(params, "limit", 20, crate::jaeger::MAX_SEARCH_DEPTH)?,
        spans_per_spanset: count_param(
            params,
            "spss",
            crate::search::DEFAULT_SPSS,
            crate::search::MAX_SPSS,
        )?,
        candidates_only: false,
        span_window: false,
    })
}

/// A field as Tempo's search answers write attributes: an OTLP/JSON value.
fn field_json(f: &Field) -> Value {
    let value = match f.kind.as_str() {
        "int" => json!({ "intValue": f.value }),
        "float" => f.value.parse::<f64>().map_or_else(
            |_| json!({ "stringValue": f.value }),
            |v| json!({ "doubleValue": v }),
        ),
        "bool" => json!({ "boolValue": f.value == "true" }),
        _ => json!({ "stringValue": f.value }),
    };
    json!({ "key": f.key, "value": value })
}

fn spanset_json(s: &MatchedSpanset) -> Value {
    let spans: Vec<Value> = s
        .spans
        .iter()
        .map(|span| {
            json!({
                "spanID": span.span_id.to_string(),
                "name": span.name,
                "startTimeUnixNano": span.start_unix_nano.to_string(),
                "durationNanos": span.duration_nanos.to_string(),
                "attributes": span.attributes.iter().map(field_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut out = json!({ "spans": spans, "matched": s.matched });
    if !s.attributes.is_empty() {
        out["attributes"] = s.attributes.iter().map(field_json).collect();
    }
    out
}

#[tracing::instrument(skip_all)]
async fn search(
    Scoped(reads): Scoped,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let request = search_request(&params)?;
    let (found, partial) = noted(reads.find(request).await?, "search");
    let traces: Vec<Value> = found
        .iter()
        .map(|m| {
            let sets: Vec<Value> = m.spansets.iter().map(spanset_json).collect();
            let mut t = json!({
                "traceID": m.trace_id.to_string(),
                "rootServiceName": m.root_service.clone().unwrap_or_else(|| "<root span not yet received>".into()),
                "startTimeUnixNano": m.start_unix_nano.to_string(),
                "durationMs": m.duration_nanos / 1_000_000,
            });
            if let Some(name) = &m.root_name {
                t["rootTraceName"] = json!(name);
            }
            // Tempo's serviceStats; as in its JSON, a zero errorCount is left out.
            let stats: serde_json::Map<String, Value> = m
                .service_stats
                .iter()
                .map(|s| {
                    let mut v = json!({ "spanCount": s.spans });
                    if s.errors > 0 {
                        v["errorCount"] = json!(s.errors);
                    }
                    (s.service.clone(), v)
                })
                .collect();
            t["serviceStats"] = Value::Object(stats);
            if let Some(first) = sets.first() {
                t["spanSet"] = first.clone();
            }
            t["spanSets"] = Value::Array(sets);
            t
        })
        .collect();
    Ok(marked(
        json_response(json!({
            "traces": traces,
            "metrics": { "inspectedTraces": found.len(), "completedJobs": 1, "totalJobs": 1 },
        })),
        &partial,
    ))
}

async fn tag_keys(reads: &Arc<dyn Reads>, range: TimeRange) -> Result<(TagKeys, Vec<String>)> {
    Ok(noted(reads.tag_keys(range).await?, "tag names"))
}

/// The intrinsics a query can name, as Grafana's editor offers them.
const INTRINSICS: &[&str] = &[
    "duration",
    "event:name",
    "event:timeSinceStart",
    "instrumentation:name",
    "instrumentation:version",
    "kind",
    "link:spanID",
    "link:traceID",
    "name",
    "rootName",
    "rootServiceName",
    "span:childCount",
    "span:duration",
    "span:id",
    "span:kind",
    "span:name",
    "span:parentID",
    "span:status",
    "span:statusMessage",
    "status",
    "statusMessage",
    "trace:duration",
    "trace:id",
    "trace:rootName",
    "trace:rootService",
    "traceDuration",
];

async fn tags_v2(
    Scoped(reads): Scoped,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let range = time_range(&params)?;
    let wanted = params.get("scope").map_or("", String::as_str);
    let (keys, partial) = tag_keys(&reads, range).await?;
    let of = |scope: TagScope| -> Vec<&str> {
        keys.iter()
            .filter(|(s, _)| *s == scope)
            .map(|(_, k)| k.as_str())
            .collect()
    };
    let mut scopes = Vec::new();
    for (name, listed) in [
        ("resource", json!(of(TagScope::Resource))),
        ("span", json!(of(TagScope::Span))),
        ("intrinsic", json!(INTRINSICS)),
    ] {
        if matches!(wanted, "" | "all" | "none") || wanted == name {
            scopes.push(json!({ "name": name, "tags": listed }));
        }
    }
    if scopes.is_empty() {
        return Err(bad(format!(
            "scope must be resource, span, intrinsic or all, got {wanted:?}"
        )));
    }
    Ok(marked(json_response(json!({ "scopes": scopes })), &partial))
}

async fn tags_v1(
    Scoped(reads): Scoped,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let range = time_range(&params)?;
    let (keys, partial) = tag_keys(&reads, range).await?;
    let mut names: Vec<&str> = keys.iter().map(|(_, k)| k.as_str()).collect();
    names.dedup();
    Ok(marked(
        json_response(json!({ "tagNames": names })),
        &partial,
    ))
}

/// A tag's values with their TraceQL types.
type Typed = Vec<(String, &'static str)>;

fn keywords(names: &[&str]) -> Typed {
    names.iter().map(|n| ((*n).to_owned(), "keyword")).collect()
}

/// Values of a tag: `resource.k`, `span.k`, `.k` or `k` (either scope), or
/// an intrinsic: `status` and `kind` (keywords), `name` (span names),
/// `rootServiceName` (services). `query` (TraceQL, possibly unfinished)
/// narrows attribute values to traces that can match it. Fields the index
/// does not keep (event, link and scope attributes, status messages) have no
/// values listed.
///
/// `limit` (0: none) keeps that many values, as Tempo's `limit` parameter
/// does; without it an attribute's values stop at
/// [`read::TAG_VALUES_MAX_BYTES`] and the answer is partial.
async fn values(
    reads: &Arc<dyn Reads>,
    tag: &str,
    range: TimeRange,
    query: &str,
    limit: usize,
) -> Result<(Typed, Vec<String>)> {
    match tag {
        "status" | "span:status" => return Ok((keywords(&["error", "ok", "unset"]), Vec::new())),
        "kind" | "span:kind" => {
            let kinds = [
                "unspecified",
                "internal",
                "server",
                "client",
                "producer",
                "consumer",
            ];
            return Ok((keywords(&kinds), Vec::new()));
        }
        "name" | "span:name" => {
            let (mut names, partial) = noted(reads.span_names(range).await?, "span names");
            if limit > 0 {
                names.truncate(limit);
            }
            return Ok((names.into_iter().map(|n| (n, "string")).collect(), partial));
        }
        _ => {}
    }
    let (scope, key) = match tag {
        "rootServiceName" | "trace:rootService" => (Some(TagScope::Resource), "service.name"),
        t if t.starts_with("resource.") => (Some(TagScope::Resource), &t["resource.".len()..]),
        t if t.starts_with("span.") => (Some(TagScope::Span), &t["span.".len()..]),
        t if t.contains(':')
            || ["event.", "link.", "instrumentation."]
                .iter()
                .any(|p| t.starts_with(p))
            || INTRINSICS.contains(&t) =>
        {
            return Ok((Vec::new(), Vec::new()))
        }
        t => (None, t.strip_prefix('.').unwrap_or(t)),
    };
    if key.is_empty() {
        return Err(bad("empty tag name"));
    }
    let (values, partial) = noted(
        reads
            .tag_values(scope, key.to_owned(), range, query.to_owned(), limit)
            .await?,
        "tag values",
    );
    Ok((
        values
            .into_iter()
            .map(|(v, kind)| (v, kind.name()))
            .collect(),
        partial,
    ))
}

async fn tag_values_v2(
    Scoped(reads): Scoped,
    Path(tag): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let range = time_range(&params)?;
    let query = params.get("q").map_or("", String::as_str);
    let limit = values_limit(&params)?;
    let (values, partial) = values(&reads, &tag, range, query, limit).await?;
    // Written out directly: a JSON object per value took a tenth of the
    // time of listing a key with a value per trace.
    let mut body = Vec::with_capacity(16 + values.iter().map(|v| v.0.len() + 28).sum::<usize>());
    body.extend_from_slice(b"{\"tagValues\":[");
    for (i, (value, kind)) in values.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"type\":");
        serde_json::to_writer(&mut body, kind).map_err(|e| Error::Internal(e.to_string()))?;
        body.extend_from_slice(b",\"value\":");
        serde_json::to_writer(&mut body, value).map_err(|e| Error::Internal(e.to_string()))?;
        body.push(b'}');
    }
    body.extend_from_slice(b"]}");
    Ok(marked(
        ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        &partial,
    ))
}

async fn tag_values_v1(
    Scoped(reads): Scoped,
    Path(tag): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response> {
    let range = time_range(&params)?;
    let limit = values_limit(&params)?;
    let (values, partial) = values(&reads, &tag, range, "", limit).await?;
    let mut values: Vec<String> = values.into_iter().map(|(v, _)| v).collect();
    values.dedup();
    Ok(marked(
        json_response(json!({ "tagValues": values })),
        &partial,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tempo_parameters() {
        assert_eq!(parse_duration("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_duration("300ms"), Some(300_000_000));
        assert_eq!(parse_duration("ms"), None);
        assert_eq!(parse_duration("10parsecs"), None);
        assert_eq!(
            parse_logfmt(r#"service.name=cart http.route="/a b""#),
            Some(vec![
                ("service.name".into(), "cart".into()),
                ("http.route".into(), "/a b".into())
            ])
        );
        assert_eq!(parse_logfmt("novalue"), None);
        assert_eq!(parse_trace_id("abc").map(|t| t.0[15]), Some(0xbc));
        assert!(parse_trace_id("xyz").is_none());
        assert!(parse_trace_id(&"a".repeat(33)).is_none());
        let params = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        // The legacy parameters become one spanset filter.
        let q = legacy_query(&params(&[
            (
                "tags",
                r#"service.name=cart name="GET /" http.status_code=500"#,
            ),
            ("minDuration", "100ms"),
        ]))
        .expect("valid")
        .expect("a query");
        assert_eq!(
            q.to_string(),
            r#"{ resource.service.name = "cart" && span:name = "GET /" && (.http.status_code = "500" || .http.status_code = 500) && trace:duration >= 100ms }"#
        );
        assert!(legacy_query(&params(&[])).expect("valid").is_none());
        assert!(legacy_query(&params(&[("minDuration", "fast")])).is_err());
        // TraceQL and the legacy parameters are not mixed.
        assert!(search_request(&params(&[("q", "{}"), ("tags", "a=b")])).is_err());
        assert!(search_request(&params(&[("q", "{ status = }")])).is_err());
        let s = search_request(&params(&[
            ("q", "{ status = error }"),
            ("limit", "5"),
            ("spss", "7"),
        ]))
        .expect("valid");
        assert_eq!((s.limit, s.spans_per_spanset), (5, 7));
    }
}
