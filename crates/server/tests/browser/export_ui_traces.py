"""Exports the traces the trace viewer's browser test looks at, with the
OpenTelemetry Python SDK's OTLP/HTTP exporter.

Usage: export_ui_traces.py HTTP_ENDPOINT OUT_JSON

- five checkout traces over three services (frontend, cart, payments), one
  second apart: five spans each; in the even ones the cart's query fails
  (status error, message "timeout"); each links to the previous one's root;
  the last also holds a span whose parent was never sent;
- a trace whose service, span name, attributes, event and status hold HTML
  and script;
- a trace of 10,000 spans (a root, 99 batches of 100 items), the newest.

OUT_JSON gets the IDs the browser test needs.
"""

import json
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

MS = 1_000_000
HOSTILE = "<img src=x onerror=\"window.__pwned=1\">"


def provider(endpoint, service):
    p = TracerProvider(resource=Resource.create({"service.name": service, "deployment.environment": "ui-test"}))
    p.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"),
            max_queue_size=20_000,
            max_export_batch_size=1_000,
        )
    )
    return p


def hex_trace(span):
    return format(span.get_span_context().trace_id, "032x")


def hex_span(span):
    return format(span.get_span_context().span_id, "016x")


def main():
    endpoint, out_path = sys.argv[1], sys.argv[2]
    names = ["frontend", "cart", "payments", HOSTILE + " service", "bulk"]
    providers = {name: provider(endpoint, name) for name in names}
    tracers = {name: p.get_tracer("tracedb.ui-test", "0.1.0") for name, p in providers.items()}
    frontend, cart, payments = tracers["frontend"], tracers["cart"], tracers["payments"]
    now = time.time_ns()
    out = {"checkout": [], "checkout_roots": []}

    previous = None
    for i in range(5):
        t0 = now - 120_000 * MS + i * 1_000 * MS
        root = frontend.start_span(
            "GET /checkout",
            kind=SpanKind.SERVER,
            start_time=t0,
            attributes={"http.method": "GET", "http.route": "/checkout", "http.status_code": 200, "user.id": f"user-{i}"},
        )
        ctx = trace.set_span_in_context(root)
        call = cart.start_span("POST /cart/checkout", context=ctx, kind=SpanKind.SERVER, start_time=t0 + 5 * MS)
        call_ctx = trace.set_span_in_context(call)
        query = cart.start_span(
            "SELECT cart", context=call_ctx, kind=SpanKind.CLIENT, start_time=t0 + 10 * MS,
            attributes={"db.system": "postgresql", "db.statement": "SELECT * FROM cart WHERE id = $1"},
        )
        query.add_event("retry", {"attempt": 1}, timestamp=t0 + 20 * MS)
        if i % 2 == 0:
            query.set_status(Status(StatusCode.ERROR, "timeout"))
        query.end(end_time=t0 + 40 * MS)
        links = [trace.Link(previous.get_span_context(), {"link.kind": "previous checkout"})] if previous else []
        charge = payments.start_span(
            "charge card", context=call_ctx, kind=SpanKind.SERVER, start_time=t0 + 45 * MS,
            links=links, attributes={"payment.amount": 12.5 + i, "payment.currency": "EUR"},
        )
        charge.end(end_time=t0 + 65 * MS)
        call.end(end_time=t0 + 70 * MS)
        render = frontend.start_span("render page", context=ctx, start_time=t0 + 80 * MS)
        render.end(end_time=t0 + 115 * MS)
        if i == 4:
            lost = SpanContext(
                trace_id=root.get_span_context().trace_id, span_id=0x0BADC0FFEE0DDF00D,
                is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            late = payments.start_span(
                "late callback", context=trace.set_span_in_context(NonRecordingSpan(lost)), start_time=t0 + 90 * MS,
            )
            late.end(end_time=t0 + 100 * MS)
            out["orphan_trace"] = hex_trace(root)
        root.end(end_time=t0 + 120 * MS)
        out["checkout"].append(hex_trace(root))
        out["checkout_roots"].append(hex_span(root))
        if i == 1:
            out["linking_span"] = hex_span(charge)
        previous = root

    t0 = now - 60_000 * MS
    evil = tracers[HOSTILE + " service"]
    span = evil.start_span(
        "<script>window.__pwned=1</script>", kind=SpanKind.SERVER, start_time=t0,
        attributes={HOSTILE: HOSTILE, "note": "<b>bold</b><svg onload=\"window.__pwned=1\">"},
    )
    span.add_event("<svg onload=\"window.__pwned=1\">", {"html": "<iframe src=\"javascript:window.__pwned=1\">"}, timestamp=t0 + MS)
    span.set_status(Status(StatusCode.ERROR, HOSTILE))
    span.end(end_time=t0 + 5 * MS)
    out["hostile"] = hex_trace(span)
    out["hostile_span"] = hex_span(span)

    t0 = now - 30_000 * MS
    bulk = tracers["bulk"]
    root = bulk.start_span("bulk job", kind=SpanKind.SERVER, start_time=t0)
    ctx = trace.set_span_in_context(root)
    for j in range(99):
        batch = bulk.start_span(f"batch {j}", context=ctx, start_time=t0 + j * MS)
        batch_ctx = trace.set_span_in_context(batch)
        for k in range(100):
            item = bulk.start_span(f"item {j}.{k}", context=batch_ctx, start_time=t0 + j * MS + k * 5_000)
            item.end(end_time=t0 + j * MS + k * 5_000 + 4_000)
        batch.end(end_time=t0 + j * MS + 500_000)
    root.end(end_time=t0 + 100 * MS)
    out["big"] = hex_trace(root)
    out["big_spans"] = 1 + 99 + 99 * 100
    out["big_last"] = "item 98.99"

    for p in providers.values():
        if not p.force_flush(60_000):
            sys.exit("force_flush timed out")
        p.shutdown()
    with open(out_path, "w") as f:
        json.dump(out, f)
    print(f"exported checkout, hostile and big traces to {endpoint}")


if __name__ == "__main__":
    main()
