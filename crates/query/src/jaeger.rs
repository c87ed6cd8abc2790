//! Jaeger v2 remote storage (`jaeger.storage.v2`, as jaeger-idl v0.14.0
//! shapes it; v0.6.0's messages are the same on the wire): `TraceReader`,
//! `DependencyReader` and `Capabilities` over the storage engine and its
//! search index.
//!
//! - `GetTraces` streams each requested trace as `TracesData` messages of one
//!   trace each (under 4 MiB, consecutive for a large trace), straight from
//!   the stored span bytes; IDs with no stored span are skipped; the optional
//!   time range is a hint that skips files outside it. Traces are read as
//!   [`crate::read`] says: one that damaged files keep from being read at all
//!   fails the call (DATA_LOSS), a partial one is logged and counted.
//! - `GetServices`, `GetOperations`, `FindTraceIDs`, `FindTraces` and
//!   `GetDependencies` read only the search index (no span payloads), except
//!   that `FindTraces` then fetches the traces it found, as `GetTraces` does.
//!   `FindTraceIDs` gives each trace's start and end as `GetTraces`' hint
//!   when the search saw the whole trace (not for a tier's row combined from
//!   parts, which may lack one).
//! - `FindTraceSummaries` summarises each trace found (root, start, end,
//!   spans, errors, orphans, per service) from the whole trace the search
//!   evaluated; a tier's row combined from parts is read whole first.
//! - `GetCapabilities` says what the searches do ([`capabilities`]).
//!
//! Search semantics: one span of the trace is of the service, has the
//! operation, every attribute (wherever Jaeger looks for a tag) and a
//! duration within the bounds, and starts within the time range; or, instead
//! of those fields, the structured filter holds on it ([`filter`]: what
//! tracedb cannot evaluate exactly is refused). Not paginated: a page's size
//! bounds the answer, a page token is refused.

pub mod filter;

use std::{pin::Pin, sync::Arc};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tonic::{Request, Response, Status};
use tracedb_lsm::{TimeRange, TraceId};
use tracedb_proto::{
    capabilities_server::Capabilities,
    codec::EncodedMessage,
    dependency_reader_server::DependencyReader,
    jaeger::storage::v2::{
        any_value, Dependency, FilterCapabilities, FindTraceIDsRequest, FindTraceIDsResponse,
        FindTraceSummariesRequest, FindTraceSummariesResponse, FindTracesRequest, FoundTraceId,
        GetCapabilitiesRequest, GetCapabilitiesResponse, GetDependenciesRequest,
        GetDependenciesResponse, GetOperationsRequest, GetOperationsResponse, GetServicesRequest,
        GetServicesResponse, GetTracesRequest, Operation, SearchCapabilities, ServiceSummary,
        TraceQueryParameters, TraceSummary,
    },
    tenant::Tenants,
    trace_reader_server::TraceReader,
};
use tracedb_traceql::{
    ast::{CmpOp, FieldExpr, Intrinsic, Pipeline, Query, SpansetExpr, Stage, Static},
    Compiled,
};

use crate::{
    error::Error,
    read::{self, Answer, Reads},
    search::{legacy, Match, Search},
    tenants::ReadsFor,
    traces_data::MAX_MESSAGE_BYTES,
};

/// Traces a search returns when the request does not say (Jaeger's default).
pub const DEFAULT_SEARCH_DEPTH: usize = 20;
/// Most traces a request may ask one search for; the answer holds at most
/// [`crate::search::MAX_LIMIT`], marked partial when that cuts it.
pub const MAX_SEARCH_DEPTH: usize = 10_000;

type MessageStream = Pin<Box<dyn Stream<Item = Result<EncodedMessage, Status>> + Send>>;
type SummaryStream = Pin<Box<dyn Stream<Item = Result<FindTraceSummariesResponse, Status>> + Send>>;

/// `jaeger.storage.v2.TraceReader` and `DependencyReader` over a store's [`Reads`].
#[derive(Clone)]
pub struct JaegerStorage {
    /// Each request reads the stores of the tenants it names.
    reads: Arc<dyn ReadsFor>,
}

impl JaegerStorage {
    pub fn new(reads: Arc<dyn ReadsFor>) -> Self {
        JaegerStorage { reads }
    }

    /// The reads of the tenants `request` names.
    fn reads_of<T>(&self, request: &Request<T>) -> Arc<dyn Reads> {
        self.reads.reads(request.extensions().get::<Tenants>())
    }

    /// Streams the traces one after the other, each as its messages; a
    /// trace with no stored span is skipped, as Jaeger expects; one whose
    /// spans cannot be read at all ends the stream with DATA_LOSS; a partial
    /// one is sent, logged and counted (Jaeger's API cannot mark it). Lookups
    /// run on the blocking pool, one trace ahead of the client at most.
    fn stream_traces(reads: Arc<dyn Reads>, traces: Vec<(TraceId, TimeRange)>) -> MessageStream {
        let (tx, rx) = mpsc::channel::<Result<EncodedMessage, Status>>(4);
        tokio::spawn(async move {
            for (id, range) in traces {
                let messages: Vec<Bytes> = match reads.trace(id, range).await {
                    Ok(found) => {
                        if found.is_partial() {
                            read::note_partial(
                                read::Api::Jaeger,
                                &found.trace_id(),
                                found.partial(),
                            );
                        }
                        found.encode(MAX_MESSAGE_BYTES)
                    }
                    Err(Error::NotFound(_)) => continue,
                    Err(e) => {
                        let _ = tx.send(Err(Status::from(e))).await;
                        return;
                    }
                };
                for m in messages {
                    if tx.send(Ok(EncodedMessage(m))).await.is_err() {
                        return; // the client went away
                    }
                }
            }
        });
        Box::pin(ReceiverStream::new(rx))
    }
}

/// The value of an answer; a partial one is logged and counted, since
/// Jaeger's API has no field to say so.
fn jaeger_whole<T>(found: Answer<T>, rpc: &str) -> T {
    if found.is_partial() {
        read::note_partial(read::Api::Jaeger, &rpc, &found.partial);
    }
    found.value
}

fn nanos(t: Option<&prost_types::Timestamp>) -> u64 {
    t.map_or(0, |t| {
        (t.seconds.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.nanos.max(0) as u64)
    })
}

fn duration_nanos(d: Option<&prost_types::Duration>) -> u64 {
    d.map_or(0, |d| {
        (d.seconds.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(d.nanos.max(0) as u64)
    })
}

fn timestamp(nanos: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

/// OTLP span kind number <-> Jaeger's span kind names.
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        1 => "internal",
        2 => "server",
        3 => "client",
        4 => "producer",
        5 => "consumer",
        _ => "",
    }
}

fn kind_number(name: &str) -> Option<u8> {
    (1..=5).find(|&k| kind_name(k).eq_ignore_ascii_case(name))
}

/// Which search a request asks for: FindTraces cannot be paginated (its
/// stream has no field for a page token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Find {
    Traces,
    TraceIds,
    Summaries,
}

/// Jaeger's search parameters as a TraceQL search, with the meaning Jaeger
/// gives them: one span of the trace is of the service, has the operation's
/// name, a duration within the bounds and every attribute (on the span,
/// its resource, one of its events or its scope, as Jaeger's tags, process
/// tags and logs; values compared as text, so `500` finds the int 500), and
/// starts within the time bounds (the trace may have begun before them).
/// The structured filter instead of those fields is one condition on that
/// span ([`filter`]). At most `search_depth` traces, or a page's size.
fn search(p: &TraceQueryParameters, find: Find) -> Result<Search, Status> {
    let invalid = |why: String| Status::from(Error::InvalidArgument(why));
    let mut conds = Vec::new();
    if !p.service_name.is_empty() {
        conds.push(legacy::service(&p.service_name));
    }
    if !p.operation_name.is_empty() {
        conds.push(legacy::span_name(&p.operation_name));
    }
    for kv in &p.attributes {
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            Some(any_value::Value::DoubleValue(d)) => d.to_string(),
            _ => {
                return Err(invalid(format!(
                    "attribute {:?}: only string, bool, int and double values can be searched",
                    kv.key
                )))
            }
        };
        conds.push(legacy::tag_anywhere(&kv.key, &value));
    }
    for (bound, op) in [(&p.duration_min, CmpOp::Ge), (&p.duration_max, CmpOp::Le)] {
        let nanos = duration_nanos(bound.as_ref());
        if nanos != 0 {
            conds.push(legacy::duration(Intrinsic::Duration, op, nanos));
        }
    }
    if let Some(f) = &p.filter {
        if !conds.is_empty() {
            return Err(invalid(
                "filter is asked with service_name, operation_name, attributes or duration_min/max: \
                 say those in the filter"
                    .to_owned(),
            ));
        }
        conds.push(filter::condition(f).map_err(invalid)?);
    }
    let query = legacy::filter(conds).unwrap_or_else(|| Query {
        pipeline: Pipeline {
            stages: vec![Stage::Spansets(SpansetExpr::Filter(FieldExpr::Static(
                Static::Bool(true),
            )))],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    });
    let depth = match (&p.pagination, p.search_depth) {
        (None, d) if d <= 0 => DEFAULT_SEARCH_DEPTH,
        (None, d) => (d as usize).min(MAX_SEARCH_DEPTH),
        (Some(_), _) if find == Find::Traces => {
            return Err(invalid(
                "FindTraces is not paginated: ask with search_depth, or paginate FindTraceIDs"
                    .to_owned(),
            ))
        }
        (Some(_), d) if d != 0 => {
            return Err(invalid(
                "pagination and search_depth are asked together: ask one".to_owned(),
            ))
        }
        (Some(page), _) if !page.page_token.is_empty() => return Err(invalid(
            "tracedb does not paginate (Capabilities: paginated is false) and gave no page token"
                .to_owned(),
        )),
        (Some(page), _) if page.page_size == 0 => {
            return Err(invalid("pagination.page_size is 0".to_owned()))
        }
        (Some(page), _) => (page.page_size as usize).min(MAX_SEARCH_DEPTH),
    };
    Ok(Search {
        text: query.to_string(),
        query: Arc::new(
            Compiled::new(query)
                .map_err(|e| Status::internal(e.to_string()))?
                .with_presence_of_any_type(),
        ),
        start_unix_nano: nanos(p.start_time_min.as_ref()),
        end_unix_nano: nanos(p.start_time_max.as_ref()),
        limit: depth,
        spans_per_spanset: 1,
        candidates_only: false,
        // A span starting in the window finds its trace, as in Jaeger.
        span_window: true,
    })
}

impl JaegerStorage {
    async fn find(
        reads: &dyn Reads,
        p: Option<TraceQueryParameters>,
        find: Find,
    ) -> Result<Vec<FoundTraceId>, Status> {
        let search = search(&p.unwrap_or_default(), find)?;
        let found = jaeger_whole(reads.find(search).await?, "FindTraceIDs");
        Ok(found
            .into_iter()
            .map(|m| {
                // The time range as a hint for GetTraces only when it is the
                // whole trace's: a row a tier combined from its nodes' parts
                // may lack a part, and the hint would skip its files.
                let (start, end) = match m.orphans {
                    Some(_) => (
                        Some(timestamp(m.start_unix_nano)),
                        Some(timestamp(
                            m.start_unix_nano.saturating_add(m.duration_nanos),
                        )),
                    ),
                    None => (None, None),
                };
                FoundTraceId {
                    trace_id: m.trace_id.0.to_vec().into(),
                    start,
                    end,
                }
            })
            .collect())
    }

    /// Streams the summaries of the traces found, [`SUMMARIES_PER_MESSAGE`]
    /// a message. A match made from the whole trace is summarised as it is;
    /// another (a tier's row combined from its nodes' parts) from the trace
    /// read whole, so no count misses a part.
    fn stream_summaries(reads: Arc<dyn Reads>, found: Vec<Match>) -> SummaryStream {
        let (tx, rx) = mpsc::channel::<Result<FindTraceSummariesResponse, Status>>(2);
        tokio::spawn(async move {
            let mut batch = Vec::new();
            for m in found {
                let whole = match m.orphans {
                    Some(_) => m,
                    None => match Self::read_summary(&*reads, m.trace_id).await {
                        Ok(Some(m)) => m,
                        Ok(None) => continue,
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    },
                };
                batch.push(trace_summary(&whole));
                if batch.len() == SUMMARIES_PER_MESSAGE {
                    let message = FindTraceSummariesResponse {
                        summaries: std::mem::take(&mut batch),
                        next_page_token: String::new(),
                    };
                    if tx.send(Ok(message)).await.is_err() {
                        return; // the client went away
                    }
                }
            }
            if !batch.is_empty() {
                let _ = tx
                    .send(Ok(FindTraceSummariesResponse {
                        summaries: batch,
                        next_page_token: String::new(),
                    }))
                    .await;
            }
        });
        Box::pin(ReceiverStream::new(rx))
    }

    /// The summary of a trace read whole; `None` when it is gone (retention).
    async fn read_summary(reads: &dyn Reads, id: TraceId) -> Result<Option<Match>, Status> {
        let found = match reads.trace(id, TimeRange::ALL).await {
            Ok(found) => found,
            Err(Error::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if found.is_partial() {
            read::note_partial(read::Api::Jaeger, &id, found.partial());
        }
        let trace = crate::search::decode(id, found.spans())
            .map_err(|e| Status::internal(format!("trace {id}: {e}")))?;
        Ok(Some(crate::search::summary(&trace)))
    }
}

/// Summaries in one FindTraceSummaries message.
const SUMMARIES_PER_MESSAGE: usize = 100;

/// Jaeger's summary of a trace from a match made from the whole trace.
fn trace_summary(m: &Match) -> TraceSummary {
    let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
    TraceSummary {
        trace_id: m.trace_id.0.to_vec().into(),
        root_service_name: m.root_service.clone().unwrap_or_default(),
        root_operation_name: m.root_name.clone().unwrap_or_default(),
        min_start_time_unix_nano: m.start_unix_nano,
        max_end_time_unix_nano: m.start_unix_nano.saturating_add(m.duration_nanos),
        span_count: count(m.span_count),
        error_span_count: count(m.error_count),
        orphan_span_count: count(m.orphans.unwrap_or_default()),
        services: m
            .service_stats
            .iter()
            .map(|s| ServiceSummary {
                name: s.service.clone(),
                span_count: count(s.spans),
                error_span_count: count(s.errors),
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl TraceReader for JaegerStorage {
    type GetTracesStream = MessageStream;
    type FindTracesStream = MessageStream;
    type FindTraceSummariesStream = SummaryStream;

    #[tracing::instrument(skip_all)]
    async fn get_traces(
        &self,
        request: Request<GetTracesRequest>,
    ) -> Result<Response<Self::GetTracesStream>, Status> {
        let reads = self.reads_of(&request);
        let mut traces = Vec::new();
        for q in &request.get_ref().query {
            let id =
                TraceId::from_slice(&q.trace_id).ok_or(Error::TraceIdLength(q.trace_id.len()))?;
            let range = TimeRange::new(nanos(q.start_time.as_ref()), nanos(q.end_time.as_ref()));
            if range.start_unix_nano != 0
                && range.end_unix_nano != 0
                && range.start_unix_nano > range.end_unix_nano
            {
                return Err(Error::TimeRange {
                    start: range.start_unix_nano,
                    end: range.end_unix_nano,
                }
                .into());
            }
            traces.push((id, range));
        }
        Ok(Response::new(Self::stream_traces(reads, traces)))
    }

    #[tracing::instrument(skip_all)]
    async fn get_services(
        &self,
        request: Request<GetServicesRequest>,
    ) -> Result<Response<GetServicesResponse>, Status> {
        let reads = self.reads_of(&request);
        Ok(Response::new(GetServicesResponse {
            services: jaeger_whole(reads.services(TimeRange::ALL).await?, "GetServices"),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_operations(
        &self,
        request: Request<GetOperationsRequest>,
    ) -> Result<Response<GetOperationsResponse>, Status> {
        let reads = self.reads_of(&request);
        let req = request.into_inner();
        let kind = match req.span_kind.as_str() {
            "" => None,
            name => Some(kind_number(name).ok_or_else(|| {
                Status::from(Error::InvalidArgument(format!(
                    "unknown span_kind {name:?}"
                )))
            })?),
        };
        let operations = reads.operations(req.service, kind, TimeRange::ALL).await?;
        let operations = jaeger_whole(operations, "GetOperations")
            .into_iter()
            .map(|(name, kind)| Operation {
                name,
                span_kind: kind_name(kind).to_string(),
            })
            .collect();
        Ok(Response::new(GetOperationsResponse { operations }))
    }

    #[tracing::instrument(skip_all)]
    async fn find_traces(
        &self,
        request: Request<FindTracesRequest>,
    ) -> Result<Response<Self::FindTracesStream>, Status> {
        let reads = self.reads_of(&request);
        let found = Self::find(&*reads, request.into_inner().query, Find::Traces).await?;
        let traces = found
            .into_iter()
            .filter_map(|f| {
                let id = TraceId::from_slice(&f.trace_id)?;
                // The index's time range of the trace, as a hint.
                let range = TimeRange::new(nanos(f.start.as_ref()), nanos(f.end.as_ref()));
                Some((id, range))
            })
            .collect();
        Ok(Response::new(Self::stream_traces(reads, traces)))
    }

    #[tracing::instrument(skip_all)]
    async fn find_trace_ids(
        &self,
        request: Request<FindTraceIDsRequest>,
    ) -> Result<Response<FindTraceIDsResponse>, Status> {
        let reads = self.reads_of(&request);
        let trace_ids = Self::find(&*reads, request.into_inner().query, Find::TraceIds).await?;
        Ok(Response::new(FindTraceIDsResponse {
            trace_ids,
            next_page_token: String::new(),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn find_trace_summaries(
        &self,
        request: Request<FindTraceSummariesRequest>,
    ) -> Result<Response<Self::FindTraceSummariesStream>, Status> {
        let reads = self.reads_of(&request);
        let params = request.into_inner().query.unwrap_or_default();
        let search = search(&params, Find::Summaries)?;
        let found = jaeger_whole(reads.find(search).await?, "FindTraceSummaries");
        Ok(Response::new(Self::stream_summaries(reads, found)))
    }
}

/// What tracedb declares to Jaeger: a search without a service, every
/// condition on one span, the structured filter's levels and operators it
/// evaluates ([`filter`]); no pagination, no FindSpans.
pub fn capabilities() -> GetCapabilitiesResponse {
    GetCapabilitiesResponse {
        search: Some(SearchCapabilities {
            without_service_name: true,
            same_span_conjunction: true,
            filter: Some(FilterCapabilities {
                levels: filter::LEVELS.iter().map(|l| l.to_string()).collect(),
                operators: filter::OPERATORS.iter().map(|o| o.to_string()).collect(),
            }),
            paginated: false,
            span_search: false,
            span_sorting: false,
        }),
    }
}

#[tonic::async_trait]
impl Capabilities for JaegerStorage {
    #[tracing::instrument(skip_all)]
    async fn get_capabilities(
        &self,
        _request: Request<GetCapabilitiesRequest>,
    ) -> Result<Response<GetCapabilitiesResponse>, Status> {
        Ok(Response::new(capabilities()))
    }
}

#[tonic::async_trait]
impl DependencyReader for JaegerStorage {
    #[tracing::instrument(skip_all)]
    async fn get_dependencies(
        &self,
        request: Request<GetDependenciesRequest>,
    ) -> Result<Response<GetDependenciesResponse>, Status> {
        let reads = self.reads_of(&request);
        let req = request.into_inner();
        let (start, end) = (nanos(req.start_time.as_ref()), nanos(req.end_time.as_ref()));
        let found = reads.dependencies(TimeRange::new(start, end)).await?;
        let found = jaeger_whole(found, "GetDependencies");
        let dependencies = found
            .into_iter()
            .map(|((parent, child), call_count)| Dependency {
                parent,
                child,
                call_count,
                source: String::new(),
            })
            .collect();
        Ok(Response::new(GetDependenciesResponse { dependencies }))
    }
}
