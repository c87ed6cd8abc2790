"""Exports traces to tracedb with the OpenTelemetry Python SDK's OTLP exporters.

Usage: export_traces.py grpc|http HOST:PORT|https://HOST:PORT OUT_FILE [TRACES]

TRACES (default 5) traces of three spans each are sent.

`grpc` uses the OTLP/gRPC exporter, `http` the OTLP/HTTP protobuf exporter (the
SDKs' default protocol, to http://HOST:PORT/v1/traces); both send gzip.
With https://HOST:PORT both connect with TLS, configured the standard way:
OTEL_EXPORTER_OTLP_CERTIFICATE (the CA to trust) and, for mutual TLS,
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY.

Every span the SDK finishes also goes to an in-memory exporter; once the OTLP
exporter has flushed, those spans are encoded the way the OTLP exporter encodes
them and written to OUT_FILE as one ExportTraceServiceRequest, so the test can
compare what tracedb returns with what the SDK sent, field for field.
"""

import sys

import grpc
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def main() -> None:
    protocol, endpoint, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    traces = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "checkout", "deployment.environment": "e2e"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tls = endpoint.startswith("https://")
    if protocol == "grpc" and tls:
        # The https scheme turns TLS on; the CA comes from the environment.
        otlp = GrpcSpanExporter(endpoint=endpoint, compression=grpc.Compression.Gzip)
    elif protocol == "grpc":
        otlp = GrpcSpanExporter(
            endpoint=endpoint, insecure=True, compression=grpc.Compression.Gzip
        )
    elif protocol == "http":
        base = endpoint if tls else f"http://{endpoint}"
        otlp = HttpSpanExporter(endpoint=f"{base}/v1/traces", compression=Compression.Gzip)
    else:
        sys.exit(f"unknown protocol {protocol!r}: use grpc or http")
    provider.add_span_processor(BatchSpanProcessor(otlp))
    tracer = provider.get_tracer(
        "tracedb.e2e", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.21.0"
    )

    previous = None
    for i in range(traces):
        attributes = {
            "http.method": "GET",
            "http.status_code": 200 + i,
            "ratio": 0.5 + i,
            "cached": i % 2 == 0,
            "tags": ["a", "b", str(i)],
        }
        with tracer.start_as_current_span(
            f"GET /cart/{i}", kind=trace.SpanKind.SERVER, attributes=attributes
        ) as root:
            root.add_event("cache miss", {"key": f"cart:{i}", "attempt": 1})
            links = [trace.Link(previous, {"link.kind": "follows"})] if previous else []
            with tracer.start_as_current_span(
                "SELECT cart", kind=trace.SpanKind.CLIENT, links=links
            ) as child:
                child.set_attribute("db.system", "postgresql")
                child.set_status(trace.Status(trace.StatusCode.ERROR, "timeout"))
                with tracer.start_as_current_span("decode row") as leaf:
                    leaf.add_event("done")
            previous = root.get_span_context()

    if not provider.force_flush(10_000):
        sys.exit("force_flush timed out")
    provider.shutdown()
    # The exporters log failed exports instead of raising: make them count.
    print(f"exported {len(memory.get_finished_spans())} spans over {protocol}")
    request = encode_spans(memory.get_finished_spans())
    with open(out_path, "wb") as out:
        out.write(request.SerializeToString())


if __name__ == "__main__":
    main()
