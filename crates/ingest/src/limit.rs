//! The status code of an over-size export.
//!
//! The OTLP specification answers a request over the server's size limit with
//! RESOURCE_EXHAUSTED and no retry information, so clients drop it instead of
//! retrying it forever. tonic says RESOURCE_EXHAUSTED when a *decompressed*
//! message passes the limit, but OUT_OF_RANGE when the frame itself is too long.
//! [`OtlpSizeStatus`] wraps the `TraceService` server and rewrites the latter.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tonic::{
    body::Body,
    codegen::http::{HeaderValue, Request, Response},
    server::NamedService,
};
use tower_service::Service;

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
