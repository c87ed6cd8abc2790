//! OTLP/HTTP: `POST /v1/traces`.
//!
//! A request goes through these steps, each of which can end it with an
//! OTLP error response (see [`crate::status`]):
//! 1. `Content-Type` picks protobuf or JSON (else 415), `Content-Encoding`
//!    gzip or none (else 415);
//! 2. admission: the server must be serving and the memory budget must hold
//!    the declared `Content-Length` (else 429/503 with `Retry-After`), and the
//!    declared length must be within `--max-message-bytes` (else 413);
//! 3. the body is read, never more than `--max-message-bytes` (else 413), and
//!    its bytes taken from the budget;
//! 4. gzip is inflated, again bounded by the limit (else 413; broken gzip 400);
//! 5. JSON is converted to protobuf (invalid JSON 400);
//! 6. [`Ingest::store`] scans and stores it, exactly as for gRPC.
//!
//! The response is in the request's content type: an
//! `ExportTraceServiceResponse` (200, with `partial_success` when spans were
//! rejected) or a `google.rpc.Status`.

use std::{io::Read as _, sync::Arc, time::Instant};

use axum::{
    body::Body,
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
    Extension, Router,
};
use bytes::Bytes;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use prost::Message as _;
use tracedb_lsm::budget::Permit;
use tracedb_proto::tenant::{TenantId, Tenants};

use crate::{
    error::Error,
    export::{tenant_of, Ingest},
    json::json_to_protobuf,
    metrics::Protocol,
    scan::ScanOutcome,
    service::export_response,
    status,
};

/// The path OTLP/HTTP exporters send traces to.
pub const TRACES_PATH: &str = "/v1/traces";

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// The OTLP/HTTP routes, to be merged into the server's router.
pub fn router(ingest: Arc<Ingest>) -> Router {
    Router::new()
        .route(TRACES_PATH, post(export_traces))
        .with_state(ingest)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Protobuf,
    Json,
}

impl Format {
    fn protocol(self) -> Protocol {
        match self {
            Format::Protobuf => Protocol::HttpProtobuf,
            Format::Json => Protocol::HttpJson,
        }
    }
}

#[tracing::instrument(skip_all)]
async fn export_traces(
    State(ingest): State<Arc<Ingest>>,
    tenants: Option<Extension<Tenants>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    // An unknown content type is answered in JSON, the readable one.
    let format = match content_type(&headers) {
        Ok(format) => format,
        Err(e) => {
            let result = Err(e);
            ingest.finish(Protocol::HttpProtobuf, None, &result, started);
            return respond(Format::Json, result);
        }
    };
    let tenant = tenant_of(tenants.as_deref());
    let result = match &tenant {
        Ok(tenant) => export(&ingest, tenant, format, &headers, body).await,
        Err(e) => Err(Error::Tenant(e.clone())),
    };
    ingest.finish(format.protocol(), tenant.as_ref().ok(), &result, started);
    respond(format, result)
}

async fn export(
    ingest: &Ingest,
    tenant: &TenantId,
    format: Format,
    headers: &HeaderMap,
    body: Body,
) -> Result<ScanOutcome, Error> {
    let gzip = content_encoding(headers)?;
    let limit = ingest.options().max_message_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut permit = ingest.admit(tenant, declared)?;

    let body = read_body(body, limit).await?;
    ingest.metrics().record_bytes(format.protocol(), body.len());
    resize(&mut permit, body.len())?;

    let body = if gzip {
        let inflated = gunzip(&body, limit)?;
        permit.grow(inflated.len())?;
        permit.shrink(body.len());
        inflated
    } else {
        body
    };
    let body = match format {
        Format::Protobuf => body,
        Format::Json => {
            let encoded = json_to_protobuf(&body)?;
            permit.grow(encoded.len())?;
            permit.shrink(body.len());
            encoded
        }
    };
    ingest.store(tenant, body, permit).await
}

/// `application/x-protobuf` or `application/json`, parameters ignored.
fn content_type(headers: &HeaderMap) -> Result<Format, Error> {
    let value = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let media = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        PROTOBUF => Ok(Format::Protobuf),
        JSON => Ok(Format::Json),
        _ => Err(Error::UnsupportedContentType(value)),
    }
}

/// Whether the body is gzip; no encoding and `identity` mean plain.
fn content_encoding(headers: &HeaderMap) -> Result<bool, Error> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(false);
    };
    let value = String::from_utf8_lossy(value.as_bytes())
        .trim()
        .to_ascii_lowercase();
    match value.as_str() {
        "" | "identity" | "none" => Ok(false),
        "gzip" | "x-gzip" => Ok(true),
        _ => Err(Error::UnsupportedEncoding(value)),
    }
}

/// Reads the whole body, refusing it as soon as it passes `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Error> {
    match Limited::new(body, limit).collect().await {
        // Copied into an exact-size allocation: stored spans keep the body alive
        // until flushed, and frames gathered into a growing buffer would keep
        // spare capacity alive that the memory budget does not count.
        Ok(collected) => Ok(Bytes::copy_from_slice(&collected.to_bytes())),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(Error::TooLarge { limit }),
        Err(e) => Err(Error::Body(e.to_string())),
    }
}

/// Makes the permit hold exactly `bytes` (the declared length may have been
/// missing or wrong).
fn resize(permit: &mut Permit, bytes: usize) -> Result<(), Error> {
    let held = permit.bytes();
    if bytes > held {
        Ok(permit.grow(bytes - held)?)
    } else {
        permit.shrink(held - bytes);
        Ok(())
    }
}

/// Inflates a gzip body, refusing it once the output passes `limit` bytes.
fn gunzip(body: &[u8], limit: usize) -> Result<Bytes, Error> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let mut decoder = flate2::read::MultiGzDecoder::new(body).take(limit as u64 + 1);
    decoder.read_to_end(&mut out).map_err(Error::Gzip)?;
    if out.len() > limit {
        return Err(Error::TooLarge { limit });
    }
    // Stored spans keep this buffer alive until flushed: no spare capacity.
    out.shrink_to_fit();
    Ok(out.into())
}

/// The response in the request's format.
fn respond(format: Format, result: Result<ScanOutcome, Error>) -> Response {
    let (code, body, retry_after) = match result {
        Ok(outcome) => {
            let response = export_response(outcome);
            let body = match format {
                Format::Protobuf => response.encode_to_vec(),
                Format::Json => {
                    let mut value = serde_json::json!({});
                    if let Some(p) = response.partial_success {
                        value["partialSuccess"] = serde_json::json!({
                            "rejectedSpans": p.rejected_spans.to_string(),
                            "errorMessage": p.error_message,
                        });
                    }
                    value.to_string().into_bytes()
                }
            };
            (StatusCode::OK, body, None)
        }
        Err(e) => {
            let rpc = status::rpc_status(&e);
            let body = match format {
                Format::Protobuf => rpc.encode_to_vec(),
                Format::Json => status::rpc_status_json(&rpc).to_string().into_bytes(),
            };
            let code = StatusCode::from_u16(status::http_code(&e))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (code, body, status::retry_after(&e))
        }
    };
    let content_type = match format {
        Format::Protobuf => PROTOBUF,
        Format::Json => JSON,
    };
    let mut response = (
        code,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    if let Some(delay) = retry_after {
        response
            .headers_mut()
            // Retry-After takes whole seconds: round up, never advise 0.
            .insert(
                header::RETRY_AFTER,
                HeaderValue::from(delay.as_secs_f64().ceil().max(1.0) as u64),
            );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn content_types() {
        let ct = |v| content_type(&headers(&[("content-type", v)]));
        assert_eq!(ct("application/x-protobuf").ok(), Some(Format::Protobuf));
        assert_eq!(
            ct("Application/JSON; charset=utf-8").ok(),
            Some(Format::Json)
        );
        assert!(matches!(
            ct("text/plain"),
            Err(Error::UnsupportedContentType(_))
        ));
        assert!(content_type(&HeaderMap::new()).is_err());
    }

    #[test]
    fn encodings() {
        let ce = |v| content_encoding(&headers(&[("content-encoding", v)]));
        assert!(!content_encoding(&HeaderMap::new()).expect("none"));
        assert!(ce("gzip").expect("gzip"));
        assert!(!ce("identity").expect("identity"));
        assert!(matches!(ce("br"), Err(Error::UnsupportedEncoding(_))));
    }

    #[test]
    fn gunzip_is_bounded() {
        use std::io::Write as _;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&[7u8; 10_000]).expect("write");
        let gz = enc.finish().expect("finish");
        assert_eq!(gunzip(&gz, 10_000).expect("fits").len(), 10_000);
        assert!(matches!(
            gunzip(&gz, 9_999),
            Err(Error::TooLarge { limit: 9_999 })
        ));
        assert!(matches!(gunzip(b"not gzip", 100), Err(Error::Gzip(_))));
        assert!(matches!(
            gunzip(&gz[..gz.len() / 2], 100_000),
            Err(Error::Gzip(_))
        ));
    }
}
