//! The one place where an export's outcome becomes a gRPC status or an HTTP
//! response, by the OTLP specification's rules:
//!
//! | outcome | gRPC | HTTP |
//! |---|---|---|
//! | stored, maybe with rejected spans | OK + `partial_success` | 200 + `partial_success` |
//! | malformed protobuf, invalid JSON, bad gzip | INVALID_ARGUMENT | 400 |
//! | over `--max-message-bytes` | RESOURCE_EXHAUSTED, no retry info | 413 |
//! | unknown content type or encoding | — | 415 |
//! | memory budget full, or storage pushing back (flush or compaction behind) | UNAVAILABLE + RetryInfo | 429 + Retry-After |
//! | storage failed, starting, shutting down | UNAVAILABLE + RetryInfo | 503 + Retry-After |
//!
//! Clients retry UNAVAILABLE, 429 and 503 after the advised delay and drop
//! everything else, so only outcomes that a later retry can fix are retryable.

use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use tonic::Code;
use tracedb_proto::google::rpc;

use crate::error::Error;

/// How long a client should wait when the memory budget is full: about the
/// time a buffer takes to flush.
pub const OVERLOAD_RETRY_DELAY: Duration = Duration::from_secs(1);
/// How long a client should wait when storage failed or the server is not
/// serving (starting up, shutting down).
pub const UNAVAILABLE_RETRY_DELAY: Duration = Duration::from_secs(5);

/// The gRPC code of a refused export, and the retry delay if it is retryable.
pub fn grpc_code(error: &Error) -> (Code, Option<Duration>) {
    match error {
        Error::Scan(_) | Error::Json(_) | Error::Gzip(_) | Error::Body(_) | Error::Tenant(_) => {
            (Code::InvalidArgument, None)
        }
        Error::UnsupportedContentType(_) | Error::UnsupportedEncoding(_) => {
            (Code::InvalidArgument, None)
        }
        Error::TooLarge { .. } => (Code::ResourceExhausted, None),
        Error::Overloaded { .. } | Error::TenantMemory { .. } => {
            (Code::Unavailable, Some(OVERLOAD_RETRY_DELAY))
        }
        // A quota: RESOURCE_EXHAUSTED, retryable because it says when.
        Error::TenantRate { retry_after, .. } => (Code::ResourceExhausted, Some(*retry_after)),
        Error::Storage(tracedb_lsm::Error::Backpressure { retry_after, .. }) => {
            (Code::Unavailable, Some(*retry_after))
        }
        Error::Storage(_) | Error::Starting | Error::ShuttingDown => {
            (Code::Unavailable, Some(UNAVAILABLE_RETRY_DELAY))
        }
    }
}

/// The HTTP status code of a refused export.
pub fn http_code(error: &Error) -> u16 {
    match error {
        Error::Scan(_) | Error::Json(_) | Error::Gzip(_) | Error::Body(_) | Error::Tenant(_) => 400,
        Error::TooLarge { .. } => 413,
        Error::UnsupportedContentType(_) | Error::UnsupportedEncoding(_) => 415,
        Error::Overloaded { .. } | Error::TenantRate { .. } | Error::TenantMemory { .. } => 429,
        Error::Storage(tracedb_lsm::Error::Backpressure { .. }) => 429,
        Error::Storage(_) | Error::Starting | Error::ShuttingDown => 503,
    }
}

/// The `google.rpc.Status` describing a refused export, with a `RetryInfo`
/// detail when the client should retry.
pub fn rpc_status(error: &Error) -> rpc::Status {
    let (code, retry) = grpc_code(error);
    rpc::Status {
        code: code as i32,
        message: error.to_string(),
        details: retry
            .map(tracedb_proto::retry::retry_info)
            .into_iter()
            .collect(),
    }
}

/// The gRPC status of a refused export; retryable ones carry `RetryInfo` in
/// `grpc-status-details-bin`, as OTLP clients expect.
pub fn grpc_status(error: &Error) -> tonic::Status {
    let status = rpc_status(error);
    let code = Code::from_i32(status.code);
    if status.details.is_empty() {
        tonic::Status::new(code, status.message)
    } else {
        let details = Bytes::from(status.encode_to_vec());
        tonic::Status::with_details(code, status.message, details)
    }
}

/// `google.rpc.Status` in the protobuf JSON mapping, for OTLP/JSON clients.
pub fn rpc_status_json(status: &rpc::Status) -> serde_json::Value {
    let details: Vec<serde_json::Value> = status
        .details
        .iter()
        .filter_map(|any| {
            let info = rpc::RetryInfo::decode(&any.value[..]).ok()?;
            let delay = info.retry_delay.unwrap_or_default();
            Some(serde_json::json!({
                "@type": any.type_url,
                // proto3 JSON writes a Duration as seconds with up to 9 decimals.
                "retryDelay": if delay.nanos == 0 {
                    format!("{}s", delay.seconds)
                } else {
                    format!("{}.{:09}", delay.seconds, delay.nanos).trim_end_matches('0').to_string() + "s"
                },
            }))
        })
        .collect();
    let mut value = serde_json::json!({
        "code": status.code,
        "message": status.message,
    });
    if !details.is_empty() {
        value["details"] = serde_json::Value::Array(details);
    }
    value
}

/// The retry delay of a retryable error, for `Retry-After`.
pub fn retry_after(error: &Error) -> Option<Duration> {
    grpc_code(error).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_is_unavailable_with_retry_info() {
        let e = Error::Overloaded {
            needed: 10,
            in_use: 100,
            limit: 100,
        };
        let status = grpc_status(&e);
        assert_eq!(status.code(), Code::Unavailable);
        let details = rpc::Status::decode(status.details()).expect("google.rpc.Status");
        assert_eq!(details.code, Code::Unavailable as i32);
        assert_eq!(
            details.details[0].type_url,
            "type.googleapis.com/google.rpc.RetryInfo"
        );
        let info = rpc::RetryInfo::decode(&details.details[0].value[..]).expect("RetryInfo");
        assert_eq!(info.retry_delay.expect("delay").seconds, 1);
        assert_eq!(http_code(&e), 429);
        let json = rpc_status_json(&details);
        assert_eq!(json["details"][0]["retryDelay"], "1s");
        assert_eq!(json["code"], 14);
    }

    #[test]
    fn storage_backpressure_is_retryable_after_its_own_delay() {
        let e = Error::Storage(tracedb_lsm::Error::Backpressure {
            reason: tracedb_lsm::error::Backpressure::TooManyL0Files {
                files: 30,
                limit: 24,
            },
            retry_after: Duration::from_secs(2),
        });
        let status = grpc_status(&e);
        assert_eq!(status.code(), Code::Unavailable);
        let details = rpc::Status::decode(status.details()).expect("google.rpc.Status");
        let info = rpc::RetryInfo::decode(&details.details[0].value[..]).expect("RetryInfo");
        assert_eq!(info.retry_delay.expect("delay").seconds, 2);
        assert_eq!(http_code(&e), 429);
        assert_eq!(retry_after(&e), Some(Duration::from_secs(2)));
    }

    #[test]
    fn sub_second_delays_keep_their_fraction() {
        let e = Error::Storage(tracedb_lsm::Error::Backpressure {
            reason: tracedb_lsm::error::Backpressure::MemoryBudget { used: 2, budget: 1 },
            retry_after: Duration::from_millis(200),
        });
        let details = rpc_status(&e);
        let info = rpc::RetryInfo::decode(&details.details[0].value[..]).expect("RetryInfo");
        let delay = info.retry_delay.expect("delay");
        assert_eq!((delay.seconds, delay.nanos), (0, 200_000_000));
        assert_eq!(
            rpc_status_json(&details)["details"][0]["retryDelay"],
            "0.2s"
        );
    }

    #[test]
    fn too_large_is_not_retryable() {
        let e = Error::TooLarge { limit: 5 };
        let status = grpc_status(&e);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.details().is_empty());
        assert_eq!(http_code(&e), 413);
        assert_eq!(retry_after(&e), None);
    }

    #[test]
    fn shutting_down_is_503() {
        assert_eq!(http_code(&Error::ShuttingDown), 503);
        assert_eq!(
            retry_after(&Error::ShuttingDown),
            Some(UNAVAILABLE_RETRY_DELAY)
        );
    }
}
