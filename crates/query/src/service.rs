//! `tracedb.query.v1.QueryService`: whole traces by ID, and trace search
//! over the search index.
//!
//! When the engine could not read a file that may hold spans of the trace (a
//! damaged file, now in quarantine), the response still carries every span
//! that was read, and its headers (initial metadata) say so:
//! `tracedb-partial: true` and `tracedb-partial-reason: <files and damage>`.
//! If no span at all could be read, the call fails with `DATA_LOSS` instead of
//! `NOT_FOUND`: the trace may exist, its data is not readable.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracedb_lsm::index::TagScope;
use tracedb_lsm::{SkippedFile, TimeRange, TraceId};
use tracedb_proto::{
    codec::EncodedMessage,
    query::v1::{
        Dependency, GetDependenciesResponse, GetOperationsRequest, GetOperationsResponse,
        GetTagKeysResponse, GetTagValuesRequest, GetTraceRequest, Names, Operation,
        QueryMetricsRequest, QueryMetricsResponse, SearchTracesRequest, SearchTracesResponse,
        TagKey, TagScope as ProtoTagScope, TimeWindow, TraceSummary,
    },
    query_service_server::QueryService,
    tenant::Tenants,
};
use tracedb_traceql::{
    ast::{CmpOp, Intrinsic},
    Compiled,
};

use crate::{
    error::Error,
    read::{self, Answer, Reads},
    search::{legacy, Search},
    tenants::ReadsFor,
    traces_data::MAX_MESSAGE_BYTES,
};

/// Response header set to `true` when spans of the trace may be missing.
pub const PARTIAL_HEADER: &str = "tracedb-partial";
/// Response header naming the files that could not be read and why.
pub const PARTIAL_REASON_HEADER: &str = "tracedb-partial-reason";
/// Longest `tracedb-partial-reason` value sent.
const REASON_MAX: usize = 1024;

/// A trace as `TracesData` messages, and why it may be incomplete.
#[derive(Debug, Default)]
pub struct TraceMessages {
    pub messages: Vec<bytes::Bytes>,
    /// Non-empty when the messages may not hold the whole trace: one reason
    /// per source skipped.
    pub partial: Vec<String>,
}

/// One line naming the skipped files and their damage.
pub fn describe_skipped(skipped: &[SkippedFile]) -> String {
    let reasons: Vec<String> = skipped.iter().map(read::file_reason).collect();
    read::describe(&reasons)
}

/// The query service over a store's [`Reads`].
#[derive(Clone)]
pub struct QueryApi {
    /// Each request reads the stores of the tenants it names.
    reads: Arc<dyn ReadsFor>,
}

impl QueryApi {
    /// SearchTraces with a TraceQL `query` ([`crate::search`]).
    async fn search_traceql(
        reads: &dyn Reads,
        r: SearchTracesRequest,
    ) -> Result<Response<SearchTracesResponse>, Status> {
        if !r.service.is_empty()
            || !r.operation.is_empty()
            || r.min_duration_nanos != 0
            || r.max_duration_nanos != 0
            || !r.tags.is_empty()
        {
            return Err(Error::InvalidArgument(
                "query (TraceQL) replaces service, operation, min/max_duration_nanos and tags: \
                 write those conditions in the query"
                    .to_owned(),
            )
            .into());
        }
        if r.start_time_unix_nano != 0
            && r.end_time_unix_nano != 0
            && r.start_time_unix_nano > r.end_time_unix_nano
        {
            return Err(Error::TimeRange {
                start: r.start_time_unix_nano,
                end: r.end_time_unix_nano,
            }
            .into());
        }
        let search = Search {
            query: crate::search::compile(&r.query)?,
            text: r.query,
            start_unix_nano: r.start_time_unix_nano,
            end_unix_nano: r.end_time_unix_nano,
            // Over the most one search answers: the answer says so.
            limit: match r.limit {
                0 => 20,
                n => (n as usize).min(crate::jaeger::MAX_SEARCH_DEPTH),
            },
            spans_per_spanset: match r.spans_per_spanset {
                0 => crate::search::DEFAULT_SPSS,
                n => (n as usize).min(crate::search::MAX_SPSS),
            },
            candidates_only: r.candidates_only,
            span_window: r.span_window,
        };
        let found = reads.find(search).await?;
        if found.is_partial() {
            read::note_partial(read::Api::Grpc, &"SearchTraces", &found.partial);
        }
        let traces = found.value.iter().map(crate::search::to_proto).collect();
        Ok(marked(
            Response::new(SearchTracesResponse { traces }),
            &found.partial,
        ))
    }
}

impl QueryApi {
    pub fn new(reads: Arc<dyn ReadsFor>) -> Self {
        QueryApi { reads }
    }

    /// The trace as `TracesData` messages under the gRPC size limit, and
    /// whether it may be incomplete; `range` holds the request's time hints.
    pub async fn trace(
        reads: &dyn Reads,
        trace_id: &[u8],
        range: TimeRange,
    ) -> Result<TraceMessages, Error> {
        let id = TraceId::from_slice(trace_id).ok_or(Error::TraceIdLength(trace_id.len()))?;
        let (start, end) = (range.start_unix_nano, range.end_unix_nano);
        if start != 0 && end != 0 && start > end {
            return Err(Error::TimeRange { start, end });
        }
        let found = reads.trace(id, range).await?;
        if found.is_partial() {
            read::note_partial(read::Api::Grpc, &found.trace_id(), found.partial());
        }
        let messages = found.encode(MAX_MESSAGE_BYTES);
        let (_, partial) = found.into_parts();
        Ok(TraceMessages { messages, partial })
    }
}

type MessageStream = Pin<Box<dyn Stream<Item = Result<EncodedMessage, Status>> + Send>>;

#[tonic::async_trait]
impl QueryService for QueryApi {
    type GetTraceStream = MessageStream;

    #[tracing::instrument(skip_all)]
    async fn get_trace(
        &self,
        request: Request<GetTraceRequest>,
    ) -> Result<Response<Self::GetTraceStream>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let req = request.get_ref();
        let range = TimeRange::new(req.start_time_unix_nano, req.end_time_unix_nano);
        let found = Self::trace(&*reads, &req.trace_id, range).await?;
        let stream = tokio_stream::iter(found.messages.into_iter().map(|m| Ok(EncodedMessage(m))));
        Ok(marked(
            Response::new(Box::pin(stream) as Self::GetTraceStream),
            &found.partial,
        ))
    }

    #[tracing::instrument(skip_all)]
    async fn search_traces(
        &self,
        request: Request<SearchTracesRequest>,
    ) -> Result<Response<SearchTracesResponse>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let r = request.into_inner();
        if !r.query.trim().is_empty() {
            return Self::search_traceql(&*reads, r).await;
        }
        // The fields' meaning, as TraceQL: `{ service && operation }` (one
        // span has both), `&& { tag }` for each tag (any span or resource),
        // `&& { traceDuration >= min && traceDuration <= max }`; answered by
        // the same newest-first search as a query.
        let mut filters = Vec::new();
        let mut span = Vec::new();
        if !r.service.is_empty() {
            span.push(legacy::service(&r.service));
        }
        if !r.operation.is_empty() {
            span.push(legacy::span_name(&r.operation));
        }
        filters.extend(legacy::all(span));
        filters.extend(r.tags.iter().map(|t| legacy::tag(&t.key, &t.value)));
        let mut lasts = Vec::new();
        for (nanos, op) in [
            (r.min_duration_nanos, CmpOp::Ge),
            (r.max_duration_nanos, CmpOp::Le),
        ] {
            if nanos != 0 {
                lasts.push(legacy::duration(Intrinsic::TraceDuration, op, nanos));
            }
        }
        filters.extend(legacy::all(lasts));
        let query = legacy::each(filters);
        if r.start_time_unix_nano != 0
            && r.end_time_unix_nano != 0
            && r.start_time_unix_nano > r.end_time_unix_nano
        {
            return Err(Error::TimeRange {
                start: r.start_time_unix_nano,
                end: r.end_time_unix_nano,
            }
            .into());
        }
        let search = Search {
            text: query.to_string(),
            query: Arc::new(Compiled::new(query).map_err(|e| Status::internal(e.to_string()))?),
            start_unix_nano: r.start_time_unix_nano,
            end_unix_nano: r.end_time_unix_nano,
            limit: match r.limit {
                0 => 20,
                n => (n as usize).min(crate::jaeger::MAX_SEARCH_DEPTH),
            },
            spans_per_spanset: 1,
            candidates_only: false,
            span_window: false,
        };
        let found = reads.find(search).await?;
        if found.is_partial() {
            read::note_partial(read::Api::Grpc, &"SearchTraces", &found.partial);
        }
        let traces = found
            .value
            .iter()
            .map(|m| TraceSummary {
                spansets: Vec::new(),
                ..crate::search::to_proto(m)
            })
            .collect();
        Ok(marked(
            Response::new(SearchTracesResponse { traces }),
            &found.partial,
        ))
    }

    #[tracing::instrument(skip_all)]
    async fn get_services(&self, request: Request<TimeWindow>) -> Result<Response<Names>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let names = reads.services(window(Some(request.get_ref()))).await?;
        Ok(answer(names, "GetServices", |names| Names {
            names,
            types: Vec::new(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_operations(
        &self,
        request: Request<GetOperationsRequest>,
    ) -> Result<Response<GetOperationsResponse>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let r = request.into_inner();
        let kind = match r.span_kind {
            0 => None,
            k @ 1..=5 => Some(k as u8),
            k => {
                return Err(Status::from(Error::InvalidArgument(format!(
                    "span_kind {k} is not 0 to 5"
                ))))
            }
        };
        let operations = reads
            .operations(r.service, kind, window(r.window.as_ref()))
            .await?;
        Ok(answer(operations, "GetOperations", |ops| {
            GetOperationsResponse {
                operations: ops
                    .into_iter()
                    .map(|(name, kind)| Operation {
                        name,
                        span_kind: kind.into(),
                    })
                    .collect(),
            }
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_span_names(
        &self,
        request: Request<TimeWindow>,
    ) -> Result<Response<Names>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let names = reads.span_names(window(Some(request.get_ref()))).await?;
        Ok(answer(names, "GetSpanNames", |names| Names {
            names,
            types: Vec::new(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_tag_keys(
        &self,
        request: Request<TimeWindow>,
    ) -> Result<Response<GetTagKeysResponse>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let keys = reads.tag_keys(window(Some(request.get_ref()))).await?;
        Ok(answer(keys, "GetTagKeys", |keys| GetTagKeysResponse {
            keys: keys
                .into_iter()
                .map(|(scope, key)| TagKey {
                    scope: proto_scope(Some(scope)).into(),
                    key,
                })
                .collect(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_tag_values(
        &self,
        request: Request<GetTagValuesRequest>,
    ) -> Result<Response<Names>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let r = request.into_inner();
        let scope = match ProtoTagScope::try_from(r.scope) {
            Ok(ProtoTagScope::Any) => None,
            Ok(ProtoTagScope::Resource) => Some(TagScope::Resource),
            Ok(ProtoTagScope::Span) => Some(TagScope::Span),
            Err(_) => {
                return Err(Status::from(Error::InvalidArgument(format!(
                    "unknown scope {}",
                    r.scope
                ))))
            }
        };
        let values = reads
            .tag_values(
                scope,
                r.key,
                window(r.window.as_ref()),
                r.query,
                r.limit as usize,
            )
            .await?;
        Ok(answer(values, "GetTagValues", |values| {
            let (names, types) = values
                .into_iter()
                .map(|(value, kind)| (value, kind.name().to_owned()))
                .unzip();
            Names { names, types }
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_dependencies(
        &self,
        request: Request<TimeWindow>,
    ) -> Result<Response<GetDependenciesResponse>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let found = reads.dependencies(window(Some(request.get_ref()))).await?;
        Ok(answer(found, "GetDependencies", |found| {
            GetDependenciesResponse {
                dependencies: found
                    .into_iter()
                    .map(|((parent, child), call_count)| Dependency {
                        parent,
                        child,
                        call_count,
                    })
                    .collect(),
            }
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn query_metrics(
        &self,
        request: Request<QueryMetricsRequest>,
    ) -> Result<Response<QueryMetricsResponse>, Status> {
        let reads = self.reads.reads(request.extensions().get::<Tenants>());
        let r = request.into_inner();
        let metrics = crate::metrics::from_proto(&r)?;
        let found = reads.metrics(metrics).await?;
        let partial = found.partial.clone();
        Ok(answer(found, "QueryMetrics", |eval| {
            if r.raw {
                let (raw, series_capped) = eval.into_raw();
                QueryMetricsResponse {
                    raw_series: crate::metrics::raw_proto(raw),
                    series_capped,
                    partial,
                    ..Default::default()
                }
            } else {
                QueryMetricsResponse {
                    series: crate::metrics::series_proto(&eval.finish()),
                    partial,
                    ..Default::default()
                }
            }
        }))
    }
}

/// `response` with the partial-answer headers when `partial` names a reason.
fn marked<T>(mut response: Response<T>, partial: &[String]) -> Response<T> {
    if !partial.is_empty() {
        let headers = response.metadata_mut();
        headers.insert(
            PARTIAL_HEADER,
            tonic::metadata::MetadataValue::from_static("true"),
        );
        if let Ok(value) = header_value(&read::describe(partial)).parse() {
            headers.insert(PARTIAL_REASON_HEADER, value);
        }
    }
    response
}

/// A list answer as a response, marked, logged and counted when partial.
fn answer<T, M>(found: Answer<T>, rpc: &str, to_message: impl FnOnce(T) -> M) -> Response<M> {
    if found.is_partial() {
        read::note_partial(read::Api::Grpc, &rpc, &found.partial);
    }
    marked(Response::new(to_message(found.value)), &found.partial)
}

/// A request's window (absent: everything).
fn window(w: Option<&TimeWindow>) -> TimeRange {
    w.map_or(TimeRange::ALL, |w| {
        TimeRange::new(w.start_time_unix_nano, w.end_time_unix_nano)
    })
}

/// The wire's tag scope of an index scope (`None`: either).
pub fn proto_scope(scope: Option<TagScope>) -> ProtoTagScope {
    match scope {
        None => ProtoTagScope::Any,
        Some(TagScope::Resource) => ProtoTagScope::Resource,
        Some(TagScope::Span) => ProtoTagScope::Span,
    }
}

/// `text` as a header value: printable ASCII only, at most `REASON_MAX` bytes.
pub fn header_value(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if out.len() > REASON_MAX {
        out.truncate(REASON_MAX - 3);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_printable_and_bounded() {
        assert_eq!(header_value("a\nb\u{e9}c"), "a?b?c");
        let long = header_value(&"x".repeat(5000));
        assert_eq!(long.len(), REASON_MAX);
        assert!(long.ends_with("..."));
        assert!(long.parse::<tonic::metadata::MetadataValue<_>>().is_ok());
    }
}
