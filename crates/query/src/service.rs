//! `tracedb.query.v1.QueryService`: whole traces by ID, and trace search
//! over the search index.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracedb_lsm::index::SearchQuery;
use tracedb_lsm::{Engine, TimeRange, TraceId};
use tracedb_proto::{
    codec::EncodedMessage,
    query::v1::{GetTraceRequest, SearchTracesRequest, SearchTracesResponse, TraceSummary},
    query_service_server::QueryService,
};

use crate::{
    error::Error,
    traces_data::{encode_traces_data, MAX_MESSAGE_BYTES},
};

/// The query service over one storage engine.
#[derive(Clone)]
pub struct QueryApi {
    engine: Arc<Engine>,
}

impl QueryApi {
    pub fn new(engine: Arc<Engine>) -> Self {
        QueryApi { engine }
    }

    /// The trace's spans as `TracesData` messages under the gRPC size limit.
    pub async fn trace_messages(&self, trace_id: &[u8]) -> Result<Vec<bytes::Bytes>, Error> {
        self.trace_messages_in(trace_id, TimeRange::ALL).await
    }

    /// [`QueryApi::trace_messages`] with the request's time hints (0 = unset):
    /// files whose spans all lie outside `range` are not read.
    pub async fn trace_messages_in(
        &self,
        trace_id: &[u8],
        range: TimeRange,
    ) -> Result<Vec<bytes::Bytes>, Error> {
        let id = TraceId::from_slice(trace_id).ok_or(Error::TraceIdLength(trace_id.len()))?;
        let (start, end) = (range.start_unix_nano, range.end_unix_nano);
        if start != 0 && end != 0 && start > end {
            return Err(Error::TimeRange { start, end });
        }
        let engine = self.engine.clone();
        // File reads go through mmap and can block on disk: keep them off the runtime threads.
        let spans = tokio::task::spawn_blocking(move || engine.get_trace_in(&id, range))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        if spans.is_empty() {
            return Err(Error::NotFound(id));
        }
        Ok(encode_traces_data(&spans, MAX_MESSAGE_BYTES))
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
        let req = request.get_ref();
        let range = TimeRange::new(req.start_time_unix_nano, req.end_time_unix_nano);
        let messages = self.trace_messages_in(&req.trace_id, range).await?;
        let stream = tokio_stream::iter(messages.into_iter().map(|m| Ok(EncodedMessage(m))));
        Ok(Response::new(Box::pin(stream)))
    }

    #[tracing::instrument(skip_all)]
    async fn search_traces(
        &self,
        request: Request<SearchTracesRequest>,
    ) -> Result<Response<SearchTracesResponse>, Status> {
        let r = request.into_inner();
        let q = SearchQuery {
            service: r.service,
            operation: r.operation,
            tags: Vec::new(),
            start_min: r.start_time_unix_nano,
            start_max: r.end_time_unix_nano,
            duration_min: r.min_duration_nanos,
            duration_max: r.max_duration_nanos,
            limit: (r.limit as usize).min(crate::jaeger::MAX_SEARCH_DEPTH),
        };
        let engine = self.engine.clone();
        let hits = tokio::task::spawn_blocking(move || engine.search(&q))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(Error::from)?;
        let traces = hits
            .into_iter()
            .map(|h| TraceSummary {
                trace_id: h.trace_id.0.to_vec().into(),
                duration_nanos: h.duration_nanos(),
                root_service: h.root_service.unwrap_or_default(),
                root_name: h.root_name.unwrap_or_default(),
                start_time_unix_nano: h.start_unix_nano,
                span_count: h.span_count,
                error_span_count: h.error_count,
                services: h.services,
            })
            .collect();
        Ok(Response::new(SearchTracesResponse { traces }))
    }
}
