//! A gRPC service that exists before its backing state does.
//!
//! The gRPC listener is up (so health checks answer NOT_SERVING) while the
//! storage engine is still opening and replaying its WAL. The query service
//! needs the engine, so it is registered as a [`Deferred`] that answers
//! UNAVAILABLE until [`Deferred::set`] gives it the real service: the
//! service waits in a [`StartCell`], the one way anything waits for the
//! engine, and [`Starting`] becomes the status.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tonic::{
    body::Body,
    codegen::http::{Request, Response},
    server::NamedService,
    Status,
};
use tower_service::Service;
use tracedb_proto::start::{StartCell, Starting};

/// A service set once, after the server started listening.
pub struct Deferred<S> {
    inner: StartCell<S>,
}

impl<S> Deferred<S> {
    pub fn new() -> Self {
        Deferred {
            inner: StartCell::new(),
        }
    }

    /// Starts serving with `service`; later calls are ignored.
    pub fn set(&self, service: S) {
        self.inner.set(service);
    }
}

impl<S> Default for Deferred<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Clone for Deferred<S> {
    fn clone(&self) -> Self {
        Deferred {
            inner: self.inner.clone(),
        }
    }
}

impl<S: NamedService> NamedService for Deferred<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for Deferred<S>
where
    S: Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // tonic's generated servers are always ready; the clone in `call` is too.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self.inner.get() {
            Ok(service) => Box::pin(service.clone().call(request)),
            Err(starting @ Starting) => {
                let status = Status::from(starting);
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}
