//! A tonic codec for handlers that work on protobuf bytes rather than prost trees.
//!
//! The OTLP export path scans spans straight out of the request body (see
//! `tracedb-ingest`), and the query path streams `TracesData` messages assembled
//! from stored span bytes. Building owned prost messages for either would cost an
//! allocation per attribute and per span. [`RawCodec`] therefore decodes a
//! request into whatever implements [`WireDecode`] (raw bytes, or a small prost
//! message such as `GetTraceRequest`) and encodes whatever implements
//! [`WireEncode`] (pre-encoded bytes, or a small prost response).

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use tonic::{
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    Status,
};

/// A request body exactly as it arrived (after gzip decompression), not yet parsed.
#[derive(Debug, Clone, Default)]
pub struct RawRequest(pub Bytes);

/// A protobuf message that is already encoded; sent as it is.
#[derive(Debug, Clone, Default)]
pub struct EncodedMessage(pub Bytes);

/// A message type that can be read from a gRPC frame.
pub trait WireDecode: Sized + Send + 'static {
    fn wire_decode(src: &mut DecodeBuf<'_>) -> Result<Self, Status>;
}

/// A message type that can be written into a gRPC frame.
pub trait WireEncode: Send + 'static {
    fn wire_encode(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status>;
}

impl WireDecode for RawRequest {
    fn wire_decode(src: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        // One copy per request into an allocation of exactly the body's size.
        // Splitting the frame off tonic's receive buffer would be free, but the
        // stored spans are slices of this body and keep it alive until they are
        // flushed, and a split-off `Bytes` keeps the whole receive buffer alive
        // (grown by doubling, so up to twice the message): in a heap profile of
        // a max-rate run that was the largest memory consumer, uncounted by the
        // memory budget.
        let n = src.remaining();
        let mut body = Vec::with_capacity(n);
        body.put(src.take(n));
        Ok(RawRequest(Bytes::from(body)))
    }
}

impl WireEncode for EncodedMessage {
    fn wire_encode(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(self.0.len());
        dst.put(self.0);
        Ok(())
    }
}

/// Implements the codec traits for prost messages that travel decoded.
macro_rules! prost_wire {
    ($($ty:ty),* $(,)?) => {$(
        impl WireDecode for $ty {
            fn wire_decode(src: &mut DecodeBuf<'_>) -> Result<Self, Status> {
                <$ty as prost::Message>::decode(src)
                    .map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))
            }
        }
        impl WireEncode for $ty {
            fn wire_encode(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
                prost::Message::encode(&self, dst)
                    .map_err(|e| Status::internal(format!("encoding response: {e}")))
            }
        }
    )*};
}

prost_wire!(
    crate::collector::trace::v1::ExportTraceServiceResponse,
    crate::query::v1::GetTraceRequest,
    crate::query::v1::SearchTracesRequest,
    crate::query::v1::SearchTracesResponse,
    crate::query::v1::TimeWindow,
    crate::query::v1::Names,
    crate::query::v1::GetOperationsRequest,
    crate::query::v1::GetOperationsResponse,
    crate::query::v1::GetTagKeysResponse,
    crate::query::v1::GetTagValuesRequest,
    crate::query::v1::GetDependenciesResponse,
    crate::query::v1::QueryMetricsRequest,
    crate::query::v1::QueryMetricsResponse,
    crate::jaeger::storage::v2::GetTracesRequest,
    crate::jaeger::storage::v2::GetServicesRequest,
    crate::jaeger::storage::v2::GetServicesResponse,
    crate::jaeger::storage::v2::GetOperationsRequest,
    crate::jaeger::storage::v2::GetOperationsResponse,
    crate::jaeger::storage::v2::FindTracesRequest,
    crate::jaeger::storage::v2::FindTraceIDsRequest,
    crate::jaeger::storage::v2::FindTraceIDsResponse,
    crate::jaeger::storage::v2::GetDependenciesRequest,
    crate::jaeger::storage::v2::GetDependenciesResponse,
    crate::jaeger::storage::v2::FindTraceSummariesRequest,
    crate::jaeger::storage::v2::FindTraceSummariesResponse,
    crate::jaeger::storage::v2::GetCapabilitiesRequest,
    crate::jaeger::storage::v2::GetCapabilitiesResponse,
);

/// The codec: `E` is what the server sends, `D` what it receives.
#[derive(Debug)]
pub struct RawCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for RawCodec<E, D> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

impl<E: WireEncode, D: WireDecode> Codec for RawCodec<E, D> {
    type Encode = E;
    type Decode = D;
    type Encoder = RawEncoder<E>;
    type Decoder = RawDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder(PhantomData)
    }
}

#[derive(Debug)]
pub struct RawEncoder<E>(PhantomData<fn(E)>);

impl<E: WireEncode> Encoder for RawEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.wire_encode(dst)
    }
}

#[derive(Debug)]
pub struct RawDecoder<D>(PhantomData<fn() -> D>);

impl<D: WireDecode> Decoder for RawDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::wire_decode(src).map(Some)
    }
}
