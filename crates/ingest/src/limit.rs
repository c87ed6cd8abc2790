//! Wrappers around the gRPC `TraceService` that act before tonic reads a body.
//!
//! [`GrpcAdmission`] refuses an export at once, without reading its body, when
//! the server is not serving or the memory budget is already full: a flood of
//! requests then costs headers, not bodies.
//!
//! [`OtlpSizeStatus`] fixes the status code of an over-size export.
//! The OTLP specification answers a request over the server's size limit with
//! RESOURCE_EXHAUSTED and no retry information, so clients drop it instead of
//! retrying it forever. tonic says RESOURCE_EXHAUSTED when a *decompressed*
//! message passes the limit, but OUT_OF_RANGE when the frame itself is too long.
//! [`OtlpSizeStatus`] wraps the `TraceService` server and rewrites the latter.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use tonic::{
    body::Body,
    codegen::http::{HeaderValue, Request, Response},
    server::NamedService,
};
use tower_service::Service;

use tracedb_proto::tenant::Tenants;

use crate::{
    export::{tenant_of, Ingest},
    metrics::Protocol,
    scan::ScanOutcome,
    status::grpc_status,
};

/// Where tonic's message for a frame over the limit begins.
const TOO_LARGE: &str = "Error, decoded message length too large";
const OUT_OF_RANGE: &str = "11";
const RESOURCE_EXHAUSTED: &str = "8";

/// A service wrapper that turns tonic's OUT_OF_RANGE for an over-size message into
/// RESOURCE_EXHAUSTED.
#[derive(Debug, Clone)]
pub struct OtlpSizeStatus<S> {
    inner: S,
}

impl<S> OtlpSizeStatus<S> {
    pub fn new(inner: S) -> Self {
        OtlpSizeStatus { inner }
    }
}

impl<S: NamedService> NamedService for OtlpSizeStatus<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for OtlpSizeStatus<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            let headers = response.headers_mut();
            let too_large = headers
                .get("grpc-status")
                .is_some_and(|v| v == OUT_OF_RANGE)
                && headers
                    .get("grpc-message")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|m| m.replace("%20", " ").starts_with(TOO_LARGE));
            if too_large {
                headers.insert("grpc-status", HeaderValue::from_static(RESOURCE_EXHAUSTED));
            }
            Ok(response)
        })
    }
}

/// A service wrapper that answers UNAVAILABLE (with retry info) before the body
/// is read when the server is not serving or the memory budget is full.
#[derive(Clone)]
pub struct GrpcAdmission<S> {
    inner: S,
    ingest: Arc<Ingest>,
}

impl<S> GrpcAdmission<S> {
    pub fn new(inner: S, ingest: Arc<Ingest>) -> Self {
        GrpcAdmission { inner, ingest }
    }
}

impl<S: NamedService> NamedService for GrpcAdmission<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for GrpcAdmission<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let started = Instant::now();
        let tenant = tenant_of(request.extensions().get::<Tenants>());
        let admitted = match &tenant {
            Ok(t) => self.ingest.admit(t, 0).map(drop),
            Err(e) => Err(crate::Error::Tenant(e.clone())),
        };
        if let Err(error) = admitted {
            let response = grpc_status(&error).into_http();
            self.ingest.finish(
                Protocol::Grpc,
                tenant.as_ref().ok(),
                &Err::<ScanOutcome, _>(error),
                started,
            );
            return Box::pin(std::future::ready(Ok(response)));
        }
        Box::pin(self.inner.call(request))
    }
}
