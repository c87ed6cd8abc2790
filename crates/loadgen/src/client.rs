//! Sending pre-encoded export requests over OTLP/gRPC or OTLP/HTTP, and GetTrace.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use prost::Message;
use tonic::{transport::Channel, Code};
use tracedb_proto::{
    codec::{EncodedMessage, RawCodec},
    collector::trace::v1::ExportTraceServiceResponse,
    query::v1::{query_service_client::QueryServiceClient, GetTraceRequest},
};

/// What happened to one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted; `rejected` spans were refused through partial success.
    Accepted { rejected: u64 },
    /// The server asked to retry later (UNAVAILABLE, RESOURCE_EXHAUSTED with
    /// retry info, HTTP 429/503).
    Throttled,
    /// Anything else: the request was lost.
    Failed(String),
}

/// An OTLP endpoint.
#[derive(Clone)]
pub enum Exporter {
    Grpc(Vec<Channel>),
    Http {
        client: Box<Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>>,
        uri: hyper::Uri,
    },
}

impl Exporter {
    /// `connections` HTTP/2 connections for gRPC; HTTP/1 pools its own.
    pub async fn connect(
        endpoint: &str,
        http: bool,
        connections: usize,
    ) -> anyhow::Result<Exporter> {
        let base = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            format!("http://{endpoint}")
        };
        if http {
            let uri: hyper::Uri = format!("{}/v1/traces", base.trim_end_matches('/')).parse()?;
            let client = Client::builder(TokioExecutor::new()).build_http();
            return Ok(Exporter::Http {
                client: Box::new(client),
                uri,
            });
        }
        let mut channels = Vec::new();
        for _ in 0..connections.max(1) {
            channels.push(Channel::from_shared(base.clone())?.connect().await?);
        }
        Ok(Exporter::Grpc(channels))
    }

    /// Sends one request body; `stream` picks the connection.
    pub async fn export(&self, body: Bytes, stream: usize) -> Outcome {
        match self {
            Exporter::Grpc(channels) => {
                let mut grpc = tonic::client::Grpc::new(channels[stream % channels.len()].clone());
                if let Err(e) = grpc.ready().await {
                    return Outcome::Failed(e.to_string());
                }
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                );
                let codec = RawCodec::<EncodedMessage, ExportTraceServiceResponse>::default();
                match grpc
                    .unary(tonic::Request::new(EncodedMessage(body)), path, codec)
                    .await
                {
                    Ok(response) => Outcome::Accepted {
                        rejected: rejected(&response.into_inner()),
                    },
                    // OTLP: UNAVAILABLE is retryable, RESOURCE_EXHAUSTED only with retry info.
                    Err(s) if s.code() == Code::Unavailable => Outcome::Throttled,
                    Err(s) if s.code() == Code::ResourceExhausted && !s.details().is_empty() => {
                        Outcome::Throttled
                    }
                    Err(s) => Outcome::Failed(format!("{:?}: {}", s.code(), s.message())),
                }
            }
            Exporter::Http { client, uri } => {
                let request = match hyper::Request::post(uri.clone())
                    .header("content-type", "application/x-protobuf")
                    .body(Full::new(body))
                {
                    Ok(r) => r,
                    Err(e) => return Outcome::Failed(e.to_string()),
                };
                let response = match client.request(request).await {
                    Ok(r) => r,
                    Err(e) => return Outcome::Failed(e.to_string()),
                };
                let status = response.status();
                let body = match response.into_body().collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => return Outcome::Failed(e.to_string()),
                };
                match status.as_u16() {
                    200 => match ExportTraceServiceResponse::decode(body) {
                        Ok(r) => Outcome::Accepted {
                            rejected: rejected(&r),
                        },
                        Err(e) => Outcome::Failed(format!("undecodable response: {e}")),
                    },
                    429 | 502 | 503 | 504 => Outcome::Throttled,
                    code => Outcome::Failed(format!("HTTP {code}")),
                }
            }
        }
    }
}

impl Exporter {
    /// Exports as a well-behaved OTLP client does: a throttled request is sent
    /// again after a pause (50 ms, doubling up to 1 s), at most `retries` times.
    /// Returns the final outcome and the number of retries it took.
    pub async fn export_retrying(
        &self,
        body: Bytes,
        stream: usize,
        retries: u32,
    ) -> (Outcome, u32) {
        let mut pause = std::time::Duration::from_millis(50);
        let mut attempt = 0;
        loop {
            let outcome = self.export(body.clone(), stream).await;
            if outcome != Outcome::Throttled || attempt == retries {
                return (outcome, attempt);
            }
            attempt += 1;
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(1));
        }
    }
}

fn rejected(response: &ExportTraceServiceResponse) -> u64 {
    response
        .partial_success
        .as_ref()
        .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0))
}

/// What GetTrace returned of a trace: its spans, and when they ran.
#[derive(Debug, Clone, Copy)]
pub struct Fetched {
    pub spans: usize,
    /// Earliest span start and latest span end (Unix ns).
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

/// Fetches a trace with tracedb's GetTrace; `Ok(None)` for NOT_FOUND.
pub async fn get_trace(
    client: &mut QueryServiceClient<Channel>,
    trace_id: u128,
) -> anyhow::Result<Option<Fetched>> {
    let request = GetTraceRequest {
        trace_id: trace_id.to_be_bytes().to_vec().into(),
        ..Default::default()
    };
    let mut stream = match client.get_trace(request).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == Code::NotFound => return Ok(None),
        Err(s) => return Err(s.into()),
    };
    let mut got = Fetched {
        spans: 0,
        start_unix_nano: u64::MAX,
        end_unix_nano: 0,
    };
    while let Some(m) = stream.message().await? {
        for span in m
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
        {
            got.spans += 1;
            got.start_unix_nano = got.start_unix_nano.min(span.start_time_unix_nano);
            got.end_unix_nano = got.end_unix_nano.max(span.end_time_unix_nano);
        }
    }
    Ok(Some(got))
}

/// SearchTraces for `service`'s traces starting within [start, end]: the
/// rows answered.
pub async fn search(
    client: &mut QueryServiceClient<Channel>,
    service: &str,
    start_unix_nano: u64,
    end_unix_nano: u64,
    limit: u32,
) -> anyhow::Result<usize> {
    let request = tracedb_proto::query::v1::SearchTracesRequest {
        service: service.to_owned(),
        start_time_unix_nano: start_unix_nano,
        end_time_unix_nano: end_unix_nano,
        limit,
        ..Default::default()
    };
    Ok(client
        .search_traces(request)
        .await?
        .into_inner()
        .traces
        .len())
}

/// Jaeger's FindTraceSummaries for `service`'s traces starting within
/// [start, end], read to the end of its stream: the summaries answered.
pub async fn find_trace_summaries(
    client: &mut tracedb_proto::jaeger::storage::v2::trace_reader_client::TraceReaderClient<
        Channel,
    >,
    service: &str,
    start_unix_nano: u64,
    end_unix_nano: u64,
    depth: i32,
) -> anyhow::Result<usize> {
    use tracedb_proto::jaeger::storage::v2::{FindTraceSummariesRequest, TraceQueryParameters};
    let at = |nanos: u64| prost_types::Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as i32,
    };
    let query = TraceQueryParameters {
        service_name: service.to_owned(),
        start_time_min: Some(at(start_unix_nano)),
        start_time_max: Some(at(end_unix_nano)),
        search_depth: depth,
        ..Default::default()
    };
    let mut stream = client
        .find_trace_summaries(FindTraceSummariesRequest { query: Some(query) })
        .await?
        .into_inner();
    let mut rows = 0;
    while let Some(m) = stream.message().await? {
        rows += m.summaries.len();
    }
    Ok(rows)
}

/// A TraceQL metrics range query (`QueryService.QueryMetrics`); returns the
/// series answered and whether the answer was marked partial.
pub async fn query_metrics(
    client: &mut QueryServiceClient<Channel>,
    query: &str,
    start_unix_nano: u64,
    end_unix_nano: u64,
    step_nanos: u64,
) -> anyhow::Result<(usize, bool)> {
    let request = tracedb_proto::query::v1::QueryMetricsRequest {
        query: query.to_owned(),
        start_time_unix_nano: start_unix_nano,
        end_time_unix_nano: end_unix_nano,
        step_nanos,
        ..Default::default()
    };
    let answer = client.query_metrics(request).await?.into_inner();
    Ok((answer.series.len(), !answer.partial.is_empty()))
}
