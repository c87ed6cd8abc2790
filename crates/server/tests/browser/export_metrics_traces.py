"""Exports the traces the metrics view's browser test charts, with the
OpenTelemetry Python SDK's OTLP/HTTP exporter.

Usage: export_metrics_traces.py HTTP_ENDPOINT OUT_JSON

Over the last 12 minutes, every 10 seconds, one trace of the service
`checkout` and one of `catalog` (a server span and a client child each,
status unset). In the 10-second interval that ends at SPIKE (a multiple of
10 s, about 5 minutes ago) `checkout` has an error spike: six traces whose
server span has status error. Outside that interval `checkout` has two
error traces, minutes away; in it, `catalog` has two error traces and
`checkout` its usual one without error. So in the spike interval the error
traces of `checkout` are exactly the six.

The metrics view over the last 15 minutes steps by 10 s (at most ~100
intervals), so its error-rate chart of `checkout` must peak at SPIKE with
0.6 errors/s (six in 10 s) against at most 0.1 elsewhere.

OUT_JSON gets SPIKE (Unix ms), the step, and the trace IDs.
"""

import json
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

MS = 1_000_000
S = 1_000 * MS
STEP = 10


def provider(endpoint, service):
    p = TracerProvider(resource=Resource.create({"service.name": service}))
    p.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"), max_queue_size=10_000))
    return p


def request(tracer, name, t0, error=False, ms=40):
    """A trace of a server span and a client child, `ms` long; its ID."""
    root = tracer.start_span(name, kind=SpanKind.SERVER, start_time=t0)
    child = tracer.start_span(
        f"{name} query", context=trace.set_span_in_context(root), kind=SpanKind.CLIENT, start_time=t0 + MS
    )
    child.end(end_time=t0 + (ms - 5) * MS)
    if error:
        root.set_status(Status(StatusCode.ERROR, "out of stock"))
    root.end(end_time=t0 + ms * MS)
    return format(root.get_span_context().trace_id, "032x")


def main():
    endpoint, out_path = sys.argv[1], sys.argv[2]
    providers = {name: provider(endpoint, name) for name in ["checkout", "catalog"]}
    checkout = providers["checkout"].get_tracer("tracedb.metrics-test")
    catalog = providers["catalog"].get_tracer("tracedb.metrics-test")
    now = time.time_ns()
    spike = (now - 300 * S) // (STEP * S) * (STEP * S)
    out = {"spike_ms": spike // MS, "step": STEP, "spike": [], "checkout_errors_elsewhere": [], "catalog_errors_in_spike": []}

    # The steady traffic: one trace of each service in each interval, 3 s
    # after its start (so 7 s before the interval's end).
    t = spike - 72 * STEP * S
    while t < now - 20 * S:
        request(checkout, "POST /checkout", t + 3 * S, ms=40)
        request(catalog, "GET /items", t + 3 * S, ms=15)
        t += STEP * S

    # The spike: six failed checkouts in (spike - 10 s, spike], each 50 ms,
    # none crossing the interval's ends.
    for i in range(6):
        out["spike"].append(request(checkout, "POST /checkout", spike - 9 * S + i * S + 200 * MS, error=True, ms=50))
    for i in range(2):
        out["catalog_errors_in_spike"].append(request(catalog, "GET /items", spike - 8 * S + i * S, error=True))
    # Failed checkouts minutes away from the spike.
    for offset in (-240, 120):
        out["checkout_errors_elsewhere"].append(request(checkout, "POST /checkout", spike + offset * S + 5 * S, error=True))

    for p in providers.values():
        if not p.force_flush(60_000):
            sys.exit("force_flush timed out")
        p.shutdown()
    with open(out_path, "w") as f:
        json.dump(out, f)
    print(f"exported checkout and catalog traces to {endpoint}, spike at {spike // MS}")


if __name__ == "__main__":
    main()
