"""Drives the trace viewer's metrics page in headless Chromium (Playwright for
Python) against a tracedb holding the traces export_metrics_traces.py sent.

Usage: ui_metrics_test.py BASE_URL IDS_JSON SCREENSHOT_DIR

Checks that the error-rate chart of `checkout` shows its spike (in the data
uPlot draws and in the canvas's pixels), that a click on the spike opens a
search listing exactly the spike's error traces, that a click on an exemplar
opens its trace, that a typed query is charted and its points open the
traces of the series clicked, that a bad query is refused with the server's
message, and that the page breaks no rule of its Content-Security-Policy.
Exits non-zero on the first check that fails, naming it. The metrics page is
written to SCREENSHOT_DIR as ui-metrics.png.
"""

import json
import os
import re
import sys
from urllib.parse import parse_qs, urlparse

from playwright.sync_api import expect, sync_playwright

from ui_test import ARGS, check

# Where a chart's point or exemplar is, in page coordinates, and the value
# uPlot draws there: read from the chart element's uPlot instance.
POINT_JS = """(node, [ms, series]) => {
  const u = node.uplot;
  const i = u.data[0].indexOf(ms / 1000);
  if (i < 0) return null;
  const box = u.over.getBoundingClientRect();
  const v = u.data[series][i];
  return { x: box.left + u.valToPos(u.data[0][i], 'x'), y: box.top + u.valToPos(v, 'y'), value: v };
}"""

# The line's pixels around a point: how many of the canvas's pixels within
# 3 px of it are near `rgb`.
PIXELS_JS = """(node, [ms, series, rgb]) => {
  const u = node.uplot;
  const i = u.data[0].indexOf(ms / 1000);
  const x = Math.round(u.valToPos(u.data[0][i], 'x', true));
  const y = Math.round(u.valToPos(u.data[series][i], 'y', true));
  const px = u.ctx.getImageData(x - 3, y - 3, 7, 7).data;
  let n = 0;
  for (let k = 0; k < px.length; k += 4) {
    if (Math.abs(px[k] - rgb[0]) < 40 && Math.abs(px[k + 1] - rgb[1]) < 40 && Math.abs(px[k + 2] - rgb[2]) < 40) n++;
  }
  return n;
}"""

ERROR_RGB = [0xC6, 0x28, 0x28]


def loaded(page):
    """Waits for the metrics page to be shown and its charts drawn."""
    expect(page.locator("#metrics-view")).to_be_visible()
    expect(page.locator("#metrics-view[aria-busy]")).to_have_count(0)


def listed(page):
    rows = page.locator("#results-body tr")
    return sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.traceId)"))


def main():
    base, ids_path, shots = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    with open(ids_path) as f:
        ids = json.load(f)
    spike_ms, step = ids["spike_ms"], ids["step"]
    expect.set_options(timeout=15_000)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("TRACEDB_TEST_CHROMIUM", "/usr/bin/chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        problems = []
        page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
        # The bad query's 400 is the one console error the test asks for.
        page.on(
            "console",
            lambda m: problems.append(f"console: {m.text}")
            if m.type == "error" and "status of 400" not in m.text
            else None,
        )
        # Anything the Content-Security-Policy refuses (an inline style set
        # as an attribute, a script from elsewhere) is reported here.
        page.add_init_script(
            "window.__csp = []; document.addEventListener('securitypolicyviolation',"
            " (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));"
        )

        # 1. The metrics page over the last 15 minutes: a row per service,
        # three charts each.
        page.goto(base + "/#/metrics?range=15m")
        loaded(page)
        rows = page.locator("#red-body .red-row")
        expect(rows).to_have_count(2)
        check(rows.evaluate_all("rs => rs.map(r => r.dataset.service)") == ["catalog", "checkout"], "one row per service")
        expect(page.locator("#red-body .chart canvas")).to_have_count(6)
        expect(page.locator("#tab-metrics")).to_have_class("current")

        # 2. checkout's error rate peaks at the spike: 6 errors in 10 s.
        chart = page.locator('.chart[data-service="checkout"][data-metric="errors"]')
        drawn = chart.evaluate("n => ({ xs: n.uplot.data[0], ys: n.uplot.data[1] })")
        samples = {round(x * 1000): y for x, y in zip(drawn["xs"], drawn["ys"]) if y is not None}
        check(abs(samples.get(spike_ms, 0) - 0.6) < 1e-9, f"0.6 errors/s at the spike: {samples.get(spike_ms)}")
        others = [v for t, v in samples.items() if t != spike_ms]
        check(len(others) >= 60 and max(others) <= 0.1 + 1e-9, f"at most 0.1 errors/s elsewhere: {max(others)}")
        check(sum(1 for v in others if v > 0) == 2, f"two other intervals with an error: {others}")
        # catalog's error chart peaks at 0.2 in the same interval.
        catalog = page.locator('.chart[data-service="catalog"][data-metric="errors"]')
        cat = catalog.evaluate(f"n => n.uplot.data[1][n.uplot.data[0].indexOf({spike_ms / 1000})]")
        check(abs(cat - 0.2) < 1e-9, f"catalog's 0.2 errors/s at the spike: {cat}")
        # The spike is drawn: red pixels on the canvas where its point is,
        # near the top of the plot (its value is the axis' maximum).
        spike = chart.evaluate(POINT_JS, [spike_ms, 1])
        check(spike is not None, "the spike's point is in the chart")
        box = chart.locator(".u-over").bounding_box()
        check(spike["y"] - box["y"] < box["height"] * 0.2, f"the spike is near the top: {spike}, {box}")
        red = chart.evaluate(PIXELS_JS, [spike_ms, 1, ERROR_RGB])
        check(red >= 3, f"the spike's line is drawn in red: {red} pixels")
        baseline = chart.evaluate(PIXELS_JS, [spike_ms - 20 * step * 1000, 1, ERROR_RGB])
        check(baseline >= 3, f"the baseline is drawn in red: {baseline} pixels")

        # Hovering the spike says its value.
        page.mouse.move(spike["x"], spike["y"] + 12)
        expect(chart.locator(".u-over")).to_have_attribute("title", re.compile(r"errors/s: 0\.6/s"))

        os.makedirs(shots, exist_ok=True)
        page.screenshot(path=os.path.join(shots, "ui-metrics.png"))

        # 3. A click on the spike opens the search for checkout's errors in
        # that interval: exactly the six traces. (Below its point, on its
        # column: the ring of an exemplar of the spike may cover the point.)
        page.mouse.click(spike["x"], spike["y"] + 12)
        expect(page.locator("#search-view")).to_be_visible()
        params = parse_qs(urlparse(page.url).fragment.split("?", 1)[1])
        check(params["range"] == ["custom"], f"a custom range: {params}")
        check(
            (int(params["from"][0]), int(params["to"][0])) == (spike_ms // 1000 - step, spike_ms // 1000),
            f"the spike's interval: {params}",
        )
        check(
            params["q"] == ['{ status = error && resource.service.name = "checkout" }'],
            f"checkout's errors: {params['q']}",
        )
        expect(page.locator("#results-body tr")).to_have_count(len(ids["spike"]))
        check(listed(page) == sorted(ids["spike"]), f"exactly the spike's traces: {listed(page)}")
        page.go_back()
        loaded(page)

        # 4. A click on an exemplar of the spike's chart opens its trace at
        # its span.
        chart = page.locator('.chart[data-service="checkout"][data-metric="errors"]')
        expect(chart.locator("canvas")).to_have_count(1)
        exemplar = chart.evaluate(
            "n => { const u = n.uplot; const s = u.data.length - 1;"
            " const i = u.data[s].findIndex((v) => v !== null);"
            " const box = u.over.getBoundingClientRect();"
            " return { ms: Math.round(u.data[0][i] * 1000), series: s, label: u.series[s].label,"
            " x: box.left + u.valToPos(u.data[0][i], 'x'), y: box.top + u.valToPos(u.data[s][i], 'y') }; }"
        )
        check(exemplar["label"].endswith("exemplars"), f"the chart draws exemplars: {exemplar}")
        wanted = chart.evaluate(
            f"n => n.lines[0].exemplars.find((e) => e.ms === {exemplar['ms']})"
        )
        check(wanted["traceId"] in ids["spike"] + ids["checkout_errors_elsewhere"], f"a checkout error trace: {wanted}")
        page.mouse.click(exemplar["x"], exemplar["y"])
        expect(page.locator("#trace-view")).to_be_visible()
        check(
            page.url.endswith(f"#/trace/{wanted['traceId']}?span={wanted['spanId']}"),
            f"the exemplar's trace and span: {page.url}",
        )
        expect(page.locator("#trace-title")).to_contain_text("POST /checkout")
        expect(page.locator("#details")).to_contain_text(wanted["spanId"])
        page.go_back()
        loaded(page)

        # 5. A typed query is charted, a series per service; a click on
        # checkout's spike opens the search of that series' traces.
        page.locator("#m-query").fill("{ status = error } | count_over_time() by(resource.service.name)")
        page.locator("#metrics-button").click()
        loaded(page)
        plot = page.locator("#query-chart-plot")
        expect(plot.locator("canvas")).to_have_count(1)
        labels = plot.evaluate("n => n.lines.map((l) => l.label)")
        check(labels == ["resource.service.name=catalog", "resource.service.name=checkout"], f"a series per service: {labels}")
        point = plot.evaluate(POINT_JS, [spike_ms, 2])
        check(point and point["value"] == 6, f"six errors of checkout at the spike: {point}")
        page.mouse.click(point["x"], point["y"] + 12)
        expect(page.locator("#search-view")).to_be_visible()
        params = parse_qs(urlparse(page.url).fragment.split("?", 1)[1])
        check(
            params["q"] == ['{ status = error && resource.service.name = "checkout" }'],
            f"the series' filter: {params['q']}",
        )
        expect(page.locator("#results-body tr")).to_have_count(len(ids["spike"]))
        check(listed(page) == sorted(ids["spike"]), f"exactly the spike's traces: {listed(page)}")
        page.go_back()
        loaded(page)

        # 6. A bad query is refused with the server's message, where.
        page.locator("#m-query").fill("{ status = error } | rate(")
        page.locator("#metrics-button").click()
        expect(page.locator("#m-query-error")).to_be_visible()
        expect(page.locator("#m-query-error-message")).to_contain_text('expected ")"')
        # A caret under where the parser stopped (column 27, the end).
        expect(page.locator("#m-query-error-where")).to_have_text("{ status = error } | rate(\n" + " " * 26 + "^")
        # A search is not a metrics query: the server says where it goes.
        page.locator("#m-query").fill("{ status = error }")
        page.locator("#metrics-button").click()
        expect(page.locator("#m-query-error-message")).to_contain_text("not a metrics query")
        # The charts per service stay.
        expect(page.locator("#red-body .red-row")).to_have_count(2)

        # 7. Picking a service charts it alone.
        page.locator("#m-service").select_option("checkout")
        expect(rows).to_have_count(1)
        check(rows.first.get_attribute("data-service") == "checkout", "checkout's row alone")
        expect(page.locator("#red-queries")).to_contain_text('{ resource.service.name = "checkout" } | rate()')

        # 8. Root spans only, as Drilldown charts by default: one of the two
        # spans of each trace, so half the span rate; the spike's errors are
        # its roots'.
        steady = spike_ms - 10 * step * 1000
        rate_at = (
            "(n, ms) => n.uplot.data[1][n.uplot.data[0].indexOf(ms / 1000)]"
        )
        rate = page.locator('.chart[data-service="checkout"][data-metric="rate"]')
        check(rate.evaluate(rate_at, steady) == 0.2, "two spans in 10 s")
        page.locator("#m-spans").select_option("root")
        expect(page.locator("#red-queries")).to_contain_text(
            '{ nestedSetParent < 0 && resource.service.name = "checkout" } | rate()'
        )
        loaded(page)
        check(rate.evaluate(rate_at, steady) == 0.1, f"one root span in 10 s: {rate.evaluate(rate_at, steady)}")
        check(chart.evaluate(rate_at, spike_ms) == 0.6, "the spike's six failed roots")

        csp = page.evaluate("window.__csp")
        check(csp == [], f"no Content-Security-Policy violations: {csp}")
        check(not problems, f"no errors in the page: {problems}")
        browser.close()
    print("metrics view: every check passed")


if __name__ == "__main__":
    main()
