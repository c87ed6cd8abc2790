#!/usr/bin/env python3
"""Loads traces.json into a server that speaks OTLP/HTTP and Tempo's metrics
API, asks every query of metrics-queries.txt, and prints the answers as JSON.

    record_metrics.py HTTP_BASE OTLP_BASE > answers.json

HTTP_BASE serves /api/metrics/query_range and /api/metrics/query (Tempo:
http://127.0.0.1:3200); OTLP_BASE serves /v1/traces (Tempo:
http://127.0.0.1:14318). The traces start at `base`, a whole minute at least
two minutes ago (Tempo leaves the last 30 s out of its answers), and every
time in the answers is relative to it, so a later run on another day gives
the same file. Each query is asked as a range query from base to base + 60 s
with a 5 s step, and as an instant query over the same minute.

Standard library only.
"""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = __file__.rsplit("/", 1)[0]
SEC = 1_000_000_000


def shifted(node, base):
    if isinstance(node, dict):
        for k, v in node.items():
            if k.endswith("UnixNano"):
                node[k] = str(base + int(v))
            else:
                shifted(v, base)
    elif isinstance(node, list):
        for v in node:
            shifted(v, base)


def load(otlp, base):
    with open(f"{HERE}/traces.json") as f:
        data = json.load(f)
    shifted(data, base)
    rs = data["resourceSpans"]
    for i in range(0, len(rs), 50):
        body = json.dumps({"resourceSpans": rs[i : i + 50]}).encode()
        req = urllib.request.Request(
            f"{otlp}/v1/traces", body, {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=30).read()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def value(v):
    """A label's value as [type, text]."""
    for k in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if k in v:
            return [k, str(v[k])]
    return ["none", ""]


def series_of(body, base_ms, instant):
    out = []
    for s in body.get("series") or []:
        labels = {l["key"]: value(l.get("value", {})) for l in s.get("labels", [])}
        entry = {"labels": labels, "exemplars": len(s.get("exemplars") or [])}
        if instant:
            entry["value"] = s.get("value", 0)
        else:
            entry["samples"] = [
                [int(p["timestampMs"]) - base_ms, p.get("value", 0)]
                for p in s.get("samples") or []
            ]
        out.append(entry)
    out.sort(key=lambda e: json.dumps(e["labels"], sort_keys=True))
    return out


def ask(http, q, base):
    start, end = base // SEC, base // SEC + 60
    answer = {"q": q}
    for kind, path, extra in (
        ("range", "query_range", "&step=5s"),
        ("instant", "query", ""),
    ):
        url = (
            f"{http}/api/metrics/{path}?q={urllib.parse.quote(q)}"
            f"&start={start}&end={end}{extra}"
        )
        status, text = get(url)
        if status != 200:
            answer[kind] = {"status": status, "error": text.strip()}
            continue
        body = json.loads(text)
        got = {"status": 200, "series": series_of(body, base // 1_000_000, kind == "instant")}
        if body.get("status") or body.get("message"):
            got["partial"] = [body.get("status"), body.get("message")]
        answer[kind] = got
    return answer


def main():
    http, otlp = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")
    base = (time.time_ns() // (60 * SEC) - 2) * 60 * SEC
    load(otlp, base)
    # Both servers list the traces within seconds; Tempo's live store then
    # answers metrics for spans at least 30 s old, which these are.
    deadline = time.time() + 60
    while time.time() < deadline:
        status, text = get(
            f"{http}/api/metrics/query?q={urllib.parse.quote('{} | count_over_time()')}"
            f"&start={base // SEC}&end={base // SEC + 60}"
        )
        if status == 200:
            total = sum(float(s.get("value", 0)) for s in json.loads(text).get("series") or [])
            if total >= 971:
                break
        time.sleep(2)
    with open(f"{HERE}/metrics-queries.txt") as f:
        queries = [l.rstrip("\n") for l in f if l.strip()]
    answers = [ask(http, q, base) for q in queries]
    json.dump({"queries": answers}, sys.stdout, indent=None, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
