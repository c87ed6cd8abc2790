//! gRPC's way to say "retry after": UNAVAILABLE with a `google.rpc.RetryInfo`
//! in `grpc-status-details-bin`, which OTLP exporters and gRPC clients honour.

use std::time::Duration;

use prost::Message as _;
use tonic::Code;

use crate::google::rpc;

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The `RetryInfo` detail advising `delay`.
pub fn retry_info(delay: Duration) -> prost_types::Any {
    prost_types::Any {
        type_url: RETRY_INFO_TYPE.to_string(),
        value: rpc::RetryInfo {
            retry_delay: Some(prost_types::Duration {
                seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
            }),
        }
        .encode_to_vec(),
    }
}

/// UNAVAILABLE with `message` and a `RetryInfo` of `delay`.
pub fn unavailable(message: String, delay: Duration) -> tonic::Status {
    let details = rpc::Status {
        code: Code::Unavailable as i32,
        message: message.clone(),
        details: vec![retry_info(delay)],
    };
    tonic::Status::with_details(Code::Unavailable, message, details.encode_to_vec().into())
}
