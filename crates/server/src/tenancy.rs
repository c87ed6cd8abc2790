//! Which tenant each request is for, decided before any service sees it.
//!
//! With `--tenancy header`, every scoped request names its tenants in one
//! header (`--tenant-header`, `X-Scope-OrgID` by default; gRPC metadata and
//! HTTP alike): one tenant, or several as `a|b` to read them together. A
//! request that names none goes to `--default-tenant` if one is set, and is
//! refused otherwise (gRPC UNAUTHENTICATED, HTTP 401); an invalid tenant ID
//! is refused with INVALID_ARGUMENT / 400 and the reason. With `--tenancy
//! certificate` (mutual TLS), a field of the connection's client
//! certificate names the one tenant instead ([`cert`]), and headers are not
//! read. The tenants go into
//! the request's extensions as [`Tenants`], which ingest
//! (`tracedb_ingest::export::tenant_of`) and every read front-end
//! (`tracedb_query::tenants::ReadsFor`) take them from.
//!
//! [`Tenanted`] wraps each scoped gRPC service (OTLP, the query service,
//! Jaeger's two); [`scope_http`] is the middleware of the scoped HTTP routes
//! (OTLP/HTTP and the Tempo API). Health, reflection, `/metrics`, `/ready`
//! and the viewer's page are not scoped. With tenancy off nothing is read
//! from requests, and every request is the single tenant's.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    extract::{ConnectInfo, Request as HttpRequest, State},
    http::{header, HeaderMap, HeaderName, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response as HttpResponse},
};
use prost::Message as _;
use tonic::{
    body::Body,
    codegen::http::{Request, Response},
    server::NamedService,
};
use tower_service::Service;
use tracedb_proto::{
    google::rpc,
    tenant::{InvalidTenant, TenantId, Tenants},
};

use crate::tls::TlsConnectInfo;

pub mod cert;

pub use cert::CertField;

/// How requests name their tenant (`--tenancy`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tenancy {
    /// One tenant: requests name none, and data is kept as it always was.
    Off,
    /// Each request names its tenants in a header.
    Header,
    /// With mutual TLS, the client's certificate names its tenant.
    Certificate,
}

/// The rule that finds a request's tenants.
#[derive(Debug)]
pub enum Rule {
    /// The tenants a header names, or a default.
    Header {
        header: HeaderName,
        default: Option<Tenants>,
    },
    /// The tenant a field of the client's certificate names.
    Certificate { field: CertField },
}

/// Why a request's tenants could not be decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request names no tenant (and there is no default): why.
    Missing(String),
    /// The request names an invalid tenant ID, or several badly.
    Invalid(InvalidTenant),
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Refusal::Missing(why) => format!("no tenant: this server keeps tenants apart; {why}"),
            Refusal::Invalid(e) => format!("invalid tenant: {e}"),
        }
    }

    fn grpc(&self) -> tonic::Status {
        match self {
            Refusal::Missing(_) => tonic::Status::unauthenticated(self.message()),
            Refusal::Invalid(_) => tonic::Status::invalid_argument(self.message()),
        }
    }

    fn http_status(&self) -> StatusCode {
        match self {
            Refusal::Missing(_) => StatusCode::UNAUTHORIZED,
            Refusal::Invalid(_) => StatusCode::BAD_REQUEST,
        }
    }
}

impl Rule {
    /// `header` must be a valid header name and `default` a valid tenant ID
    /// (both checked by the configuration first).
    pub fn new(header: &str, default: Option<&str>) -> Result<Rule, String> {
        let header = HeaderName::try_from(header.to_ascii_lowercase())
            .map_err(|_| format!("{header:?} is not a header name"))?;
        let default = default
            .map(|d| TenantId::new(d).map(Tenants::one))
            .transpose()
            .map_err(|e| format!("default tenant: {e}"))?;
        Ok(Rule::Header { header, default })
    }

    /// The header the rule reads, if it reads one.
    pub fn header(&self) -> Option<&HeaderName> {
        match self {
            Rule::Header { header, .. } => Some(header),
            Rule::Certificate { .. } => None,
        }
    }

    /// The tenants a request names: by its `headers`, or by the client
    /// certificate (DER) of its connection, `cert`.
    pub fn tenants(&self, headers: &HeaderMap, cert: Option<&[u8]>) -> Result<Tenants, Refusal> {
        let (header, default) = match self {
            Rule::Header { header, default } => (header, default),
            Rule::Certificate { field } => {
                let cert = cert.ok_or_else(|| {
                    Refusal::Missing("connect with a client certificate".to_string())
                })?;
                let name = cert::field(cert, *field).ok_or_else(|| {
                    Refusal::Missing(format!(
                        "the client certificate has no {}, which names the tenant",
                        field.describe()
                    ))
                })?;
                return TenantId::new(&name)
                    .map(Tenants::one)
                    .map_err(Refusal::Invalid);
            }
        };
        let values: Vec<_> = headers.get_all(header).iter().collect();
        match values.as_slice() {
            [] => default
                .clone()
                .ok_or_else(|| Refusal::Missing(format!("name yours in the {header} header"))),
            [one] => {
                let text = one.to_str().map_err(|_| {
                    Refusal::Invalid(invalid("the tenant header is not ASCII text"))
                })?;
                Tenants::parse(text).map_err(Refusal::Invalid)
            }
            _ => Err(Refusal::Invalid(invalid(
                "the tenant header is given more than once: name several tenants in one, as a|b",
            ))),
        }
    }
}

fn invalid(reason: &str) -> InvalidTenant {
    InvalidTenant::new(reason)
}

/// A scoped gRPC service: the request's tenants are decided (and put in its
/// extensions) before `inner` sees it, or it is refused without reaching it.
#[derive(Clone)]
pub struct Tenanted<S> {
    inner: S,
    rule: Option<Arc<Rule>>,
}

impl<S> Tenanted<S> {
    /// `rule`: `None` with tenancy off (requests pass as they are).
    pub fn new(inner: S, rule: Option<Arc<Rule>>) -> Self {
        Tenanted { inner, rule }
    }
}

impl<S: NamedService> NamedService for Tenanted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for Tenanted<S>
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

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(rule) = &self.rule {
            let cert = request
                .extensions()
                .get::<TlsConnectInfo>()
                .and_then(|c| c.peer_cert.clone());
            match rule.tenants(request.headers(), cert.as_deref()) {
                Ok(tenants) => {
                    request.extensions_mut().insert(tenants);
                }
                Err(refusal) => {
                    let response = refusal.grpc().into_http();
                    return Box::pin(std::future::ready(Ok(response)));
                }
            }
        }
        Box::pin(self.inner.call(request))
    }
}

/// The middleware of the scoped HTTP routes (see the module docs). An
/// OTLP/HTTP export is refused with a `google.rpc.Status` body in its own
/// encoding, as the OTLP specification asks; anything else in plain text.
pub async fn scope_http(
    State(rule): State<Option<Arc<Rule>>>,
    mut request: HttpRequest,
    next: Next,
) -> HttpResponse {
    let Some(rule) = rule else {
        return next.run(request).await;
    };
    let cert = request
        .extensions()
        .get::<ConnectInfo<TlsConnectInfo>>()
        .and_then(|c| c.0.peer_cert.clone());
    match rule.tenants(request.headers(), cert.as_deref()) {
        Ok(tenants) => {
            request.extensions_mut().insert(tenants);
            next.run(request).await
        }
        Err(refusal) => {
            let otlp = request.uri().path() == tracedb_ingest::http::TRACES_PATH;
            let json = request
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            let code = refusal.http_status();
            if !otlp {
                // The viewer asks its reader for a tenant, and names it in
                // this header.
                let Some(header) = rule.header() else {
                    return (code, refusal.message()).into_response();
                };
                let named = [("tracedb-tenant-header", header.to_string())];
                return (code, named, refusal.message()).into_response();
            }
            let status = rpc::Status {
                code: refusal.grpc().code() as i32,
                message: refusal.message(),
                details: Vec::new(),
            };
            if json {
                let body = tracedb_ingest::status::rpc_status_json(&status).to_string();
                (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
            } else {
                let body = status.encode_to_vec();
                (
                    code,
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    body,
                )
                    .into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    #[test]
    fn a_request_names_its_tenants_in_the_configured_header() {
        let rule = Rule::new("X-Scope-OrgID", None).expect("rule");
        let t = rule
            .tenants(&headers(&[("x-scope-orgid", "b|a")]), None)
            .expect("tenants");
        assert_eq!(t.to_string(), "a|b");
        assert!(matches!(
            rule.tenants(&headers(&[]), None),
            Err(Refusal::Missing(_))
        ));
        assert!(matches!(
            rule.tenants(&headers(&[("x-scope-orgid", "a/b")]), None),
            Err(Refusal::Invalid(_))
        ));
        assert!(matches!(
            rule.tenants(
                &headers(&[("x-scope-orgid", "a"), ("x-scope-orgid", "b")]),
                None
            ),
            Err(Refusal::Invalid(_))
        ));
        // Another header counts for nothing.
        assert!(rule.tenants(&headers(&[("x-tenant", "a")]), None).is_err());

        let other = Rule::new("X-Tenant", Some("fallback")).expect("rule");
        let t = other
            .tenants(&headers(&[("x-tenant", "a")]), None)
            .expect("tenants");
        assert_eq!(t.to_string(), "a");
        let t = other
            .tenants(&headers(&[("x-scope-orgid", "a")]), None)
            .expect("default");
        assert_eq!(t.to_string(), "fallback");
        assert_eq!(
            Refusal::Missing("x".into()).grpc().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(Refusal::Missing("x".into()).http_status(), 401);
        assert!(Rule::new("bad header", None).is_err());
        assert!(Rule::new("x", Some("../up")).is_err());
    }
}
