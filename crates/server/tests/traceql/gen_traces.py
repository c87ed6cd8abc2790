#!/usr/bin/env python3
"""Deterministic TraceQL fixture generator.

Prints one OTLP/JSON document, {"resourceSpans": [...]}, to stdout. IDs are
lowercase hex, int64 values are strings, `kind` and `status.code` integers.
Every timestamp (span start/end, event time) is a nanosecond OFFSET from 0:
whoever loads the file adds a base time (e.g. now minus 60 s).

No arguments; stdlib only; seeded with random.Random(31), so the output is
byte-for-byte stable. traces.json beside this file is its committed output.
"""

import json
import sys
from random import Random

MS = 1_000_000
S = 1000 * MS

rng = Random(31)

SERVICES = ["frontend", "cart", "checkout", "payments", "db", "search"]
OPS = {
    "frontend": ["GET /api/products", "POST /api/cart", "GET /", "PUT /api/profile"],
    "cart": ["cart.add", "cart.get", "cart.remove"],
    "checkout": ["checkout.place", "checkout.validate"],
    "payments": ["charge", "refund"],
    "db": ["SELECT", "INSERT", "UPDATE"],
    "search": ["search.query", "search.suggest"],
}
ROUTES = {
    "frontend": ["/api/products", "/api/cart", "/", "/api/profile"],
    "cart": ["/cart", "/cart/items"],
    "checkout": ["/checkout"],
    "payments": ["/pay", "/refund"],
    "db": ["/db"],
    "search": ["/search", "/search/suggest"],
}
REGIONS = ["eu", "us", "ap"]
ENVS = ["prod", "prod", "staging"]
CPUS = [2, 4, 8, 16]
SCOPES = [("lib-a", "1.0.0"), ("lib-b", "2.1.0")]
ERROR_MESSAGES = ["card declined", "timeout", "connection refused", "card declined: insufficient funds", ""]


def hexid(bits):
    while True:
        v = rng.getrandbits(bits)
        if v:
            return format(v, "0%dx" % (bits // 4))


def sval(v):
    return {"stringValue": v}


def ival(v):
    return {"intValue": str(v)}


def dval(v):
    return {"doubleValue": v}


def bval(v):
    return {"boolValue": v}


def aval(vals):
    return {"arrayValue": {"values": vals}}


def kv(k, v):
    return {"key": k, "value": v}


def pick_duration(lo, hi):
    """Roughly log-uniform duration in [lo, hi] ns, microsecond granularity."""
    if hi <= lo:
        return lo
    span = hi - lo
    f = rng.random() ** 3  # skew towards short
    return lo + (int(span * f) // 1000) * 1000


def make_attrs(service, status_code):
    attrs = []
    r = rng.random()
    if r < 0.6:
        method = rng.choice(["GET", "GET", "POST", "PUT"])
        attrs.append(kv("http.method", sval(method)))
        if rng.random() < 0.5:
            attrs.append(kv("http.route", sval(rng.choice(ROUTES[service]))))
        if rng.random() < 0.85:
            if status_code == 2:  # error
                code = rng.choice([500, 503, 404])
            else:
                code = rng.choice([200, 200, 200, 201, 404])
            if rng.random() < 0.03:
                attrs.append(kv("http.status_code", sval(str(code))))  # string-typed outlier
            else:
                attrs.append(kv("http.status_code", ival(code)))
    if rng.random() < 0.25:
        if rng.random() < 0.15:
            attrs.append(kv("ratio", ival(rng.choice([1, 2]))))  # int-typed outlier
        else:
            attrs.append(kv("ratio", dval(rng.choice([0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.25]))))
    if rng.random() < 0.25:
        attrs.append(kv("cache.hit", bval(rng.random() < 0.5)))
    if rng.random() < 0.09:
        n = rng.randint(1, 3)
        attrs.append(kv("tags", aval([sval(t) for t in rng.sample(["red", "green", "blue", "vip", "beta"], n)])))
    if rng.random() < 0.08:
        n = rng.randint(1, 3)
        attrs.append(kv("codes", aval([ival(c) for c in rng.sample([1, 2, 3, 7, 42, 500], n)])))
    if rng.random() < 0.04:
        attrs.append(kv("weights", aval([dval(x) for x in rng.sample([0.5, 1.5, 2.5], 2)])))
    if rng.random() < 0.12:
        attrs.append(kv("retries", ival(rng.randint(0, 5))))  # dot-less name
    if rng.random() < 0.1:
        attrs.append(kv("my attr", sval(rng.choice(["x", "y z"]))))  # name with a space
    if rng.random() < 0.05:
        attrs.append(kv("odd-key/1", sval("odd")))  # name with odd characters
    if rng.random() < 0.1:
        attrs.append(kv("team", sval(rng.choice(["core", "ops"]))))  # also a resource attr on some resources
    if service == "db" and rng.random() < 0.8:
        attrs.append(kv("db.system", sval(rng.choice(["postgresql", "mysql"]))))
        attrs.append(kv("db.rows", ival(rng.randint(0, 1000))))
    return attrs


def make_resource(service):
    attrs = [
        kv("service.name", sval(service)),
        kv("region", sval(rng.choice(REGIONS))),
        kv("deployment.environment", sval(rng.choice(ENVS))),
        kv("host.cpus", ival(rng.choice(CPUS))),
    ]
    if rng.random() < 0.25:
        attrs.append(kv("team", sval(rng.choice(["core", "growth"]))))
    return {"attributes": attrs}


def gen():
    n_traces = 300
    out = []
    trace_ids = []
    done_spans = []  # (trace_id, span_id) of earlier traces, for links
    for ti in range(n_traces):
        trace_id = hexid(128)
        trace_ids.append(trace_id)
        n = rng.choice([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 5, 7, 12])
        rootless = ti % 20 == 7  # 5 %
        split = ti % 37 == 11  # a few traces with one service in two ResourceSpans
        start = rng.randint(0, 50 * S)
        if ti % 50 == 3:
            root_dur = 4 * S
        elif ti % 50 == 4:
            root_dur = 1 * MS
        else:
            root_dur = pick_duration(max(MS, n * 2 * MS), 4 * S)
        spans = []
        root_service = "frontend" if rng.random() < 0.8 else rng.choice(SERVICES[1:])
        for i in range(n):
            if i == 0:
                parent = None
                svc = root_service
                s0, dur = start, root_dur
            else:
                parent = spans[rng.randrange(len(spans))]
                svc = parent["svc"] if rng.random() < 0.6 else rng.choice(SERVICES)
                pend = parent["s"] + parent["d"]
                s0 = parent["s"] + int(rng.random() * parent["d"] * 0.6)
                s0 = min(s0, pend - MS)
                s0 = max(s0, parent["s"])
                dur = pick_duration(MS, pend - s0)
                if i == 1 and ti % 25 == 5:
                    dur = min(100 * MS, pend - s0)  # some exact 100ms spans
            spans.append({"id": hexid(64), "parent": parent, "svc": svc, "s": s0, "d": dur, "i": i})
        resources = {}
        res_scope = {}
        for sp in spans:
            if sp["svc"] not in resources:
                resources[sp["svc"]] = make_resource(sp["svc"])
                res_scope[sp["svc"]] = rng.choice(SCOPES)
        # Build OTLP spans
        groups = {}  # (svc, part, scope) -> list
        for sp in spans:
            if rootless and sp["i"] == 0:
                if n == 1:
                    pass  # a one-span trace has no child to keep; fall through and keep it
                else:
                    continue
            svc = sp["svc"]
            if sp["i"] == 0:
                kind = 2 if svc == "frontend" else rng.choice([2, 1])
            else:
                kind = rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 5])
            r = rng.random()
            if r < 0.6:
                status = {}
                scode = 0
            elif r < 0.78:
                scode = 1
                status = {"code": 1}
                if rng.random() < 0.1:
                    status["message"] = "all good"
            else:
                scode = 2
                msg = rng.choice(ERROR_MESSAGES)
                status = {"code": 2}
                if msg:
                    status["message"] = msg
            o = {
                "traceId": trace_id,
                "spanId": sp["id"],
            }
            if sp["parent"] is not None:
                o["parentSpanId"] = sp["parent"]["id"]
            o["name"] = rng.choice(OPS[svc])
            o["kind"] = kind
            o["startTimeUnixNano"] = str(sp["s"])
            o["endTimeUnixNano"] = str(sp["s"] + sp["d"])
            attrs = make_attrs(svc, scode)
            if attrs:
                o["attributes"] = attrs
            events = []
            if scode == 2 and rng.random() < 0.6 or rng.random() < 0.05:
                et = rng.choice(["CardError", "TimeoutError", "IOError"])
                events.append({
                    "timeUnixNano": str(sp["s"] + int(sp["d"] * rng.random())),
                    "name": "exception",
                    "attributes": [
                        kv("exception.type", sval(et)),
                        kv("exception.message", sval(rng.choice(["card declined", "deadline exceeded", "broken pipe"]))),
                    ],
                })
            if rng.random() < 0.06:
                for a in range(1, rng.randint(1, 3) + 1):
                    events.append({
                        "timeUnixNano": str(sp["s"] + int(sp["d"] * rng.random())),
                        "name": "retry",
                        "attributes": [kv("attempt", ival(a))],
                    })
            if events:
                events.sort(key=lambda e: int(e["timeUnixNano"]))
                o["events"] = events
            if done_spans and rng.random() < 0.08:
                lt, ls = done_spans[rng.randrange(len(done_spans))]
                o["links"] = [{
                    "traceId": lt,
                    "spanId": ls,
                    "attributes": [kv("kind", sval(rng.choice(["follows", "caused_by"])))],
                }]
            if status:
                o["status"] = status
            part = 0
            if split and svc == root_service and sp["i"] % 2 == 1:
                part = 1
            scope = res_scope[svc]
            if rng.random() < 0.15:
                scope = SCOPES[1] if scope == SCOPES[0] else SCOPES[0]
            groups.setdefault((svc, part, scope), []).append(o)
        for sp in spans:
            done_spans.append((trace_id, sp["id"]))
        # Emit: one ResourceSpans per (service, part), ScopeSpans per scope
        by_res = {}
        for (svc, part, scope), lst in groups.items():
            by_res.setdefault((svc, part), []).append((scope, lst))
        for (svc, part), scope_lists in by_res.items():
            scope_spans = []
            for (sname, sver), lst in scope_lists:
                scope = {"name": sname, "version": sver,
                         "attributes": [kv("lib.lang", sval("go" if sname == "lib-a" else "java"))]}
                scope_spans.append({"scope": scope, "spans": lst})
            out.append({"resource": resources[svc], "scopeSpans": scope_spans})
    return out


def main():
    rs = gen()
    sys.stdout.write('{"resourceSpans": [\n')
    sys.stdout.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in rs))
    sys.stdout.write("\n]}\n")


if __name__ == "__main__":
    main()
