//! `tracedb.query.v1.QueryService`: whole traces by ID.

use std::{pin::Pin, sync::Arc};

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracedb_lsm::{Engine, TraceId};
use tracedb_proto::{
    codec::EncodedMessage, query::v1::GetTraceRequest, query_service_server::QueryService,
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
        let id = TraceId::from_slice(trace_id).ok_or(Error::TraceIdLength(trace_id.len()))?;
        let engine = self.engine.clone();
        // File reads go through mmap and can block on disk: keep them off the runtime threads.
        let spans = tokio::task::spawn_blocking(move || engine.get_trace(&id))
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
        let messages = self.trace_messages(&request.get_ref().trace_id).await?;
        let stream = tokio_stream::iter(messages.into_iter().map(|m| Ok(EncodedMessage(m))));
        Ok(Response::new(Box::pin(stream)))
    }
}
