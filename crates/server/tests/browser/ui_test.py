"""Drives the trace viewer in headless Chromium (Playwright for Python) against
a tracedb holding the traces export_ui_traces.py sent.

Usage: ui_test.py BASE_URL IDS_JSON SCREENSHOT_DIR

Exits non-zero on the first check that fails, naming it. Chromium is the one
at $TRACEDB_TEST_CHROMIUM, else /usr/bin/chromium (Debian's `chromium`).
The search page and a trace are written to SCREENSHOT_DIR as ui-search.png
and ui-trace.png.
"""

import json
import os
import re
import sys
import time

from playwright.sync_api import expect, sync_playwright

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Most span rows the waterfall may hold in the document at once.
MAX_ROWS = 120


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def main():
    base, ids_path, shots = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    with open(ids_path) as f:
        ids = json.load(f)
    checkout, roots = ids["checkout"], ids["checkout_roots"]
    expect.set_options(timeout=15_000)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("TRACEDB_TEST_CHROMIUM", "/usr/bin/chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        problems, dialogs, requests = [], [], []
        page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
        # A console error is a problem unless it is the browser noting what
        # the test asked for: a 4xx (an unknown trace, a bad query), a refused
        # connection (the unreachable server).
        expected = ("status of 40", "net::ERR_CONNECTION_REFUSED")
        page.on(
            "console",
            lambda m: problems.append(f"console: {m.text}")
            if m.type == "error" and not any(e in m.text for e in expected)
            else None,
        )
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: requests.append((r.method, r.url)))

        # 1. Opening the page lists the newest traces, without typing.
        page.goto(base + "/")
        rows = page.locator("#results-body tr")
        expect(rows).to_have_count(len(checkout) + 2)
        listed = rows.evaluate_all("rs => rs.map(r => r.dataset.traceId)")
        check(listed[0] == ids["big"], f"the newest trace first: {listed}")
        check(listed[2:] == list(reversed(checkout)), f"newest first: {listed}")
        first_checkout = page.locator(f'#results-body tr[data-trace-id="{checkout[0]}"] td')
        expect(first_checkout.nth(1)).to_have_text("frontend: GET /checkout")
        expect(first_checkout.nth(3)).to_have_text("120ms")
        expect(first_checkout.nth(4)).to_have_text("5")  # spans
        expect(first_checkout.nth(5)).to_have_text("1")  # errors
        expect(page.locator(f'#results-body tr[data-trace-id="{checkout[1]}"] td').nth(5)).to_have_text("0")
        expect(page.locator(f'#results-body tr[data-trace-id="{ids["big"]}"] td').nth(4)).to_have_text("10000")
        expect(page.locator("#search-status")).to_contain_text("newest first")

        # 2. Completion of attribute names, then of that attribute's values.
        query = page.locator("#query")
        query.fill("")
        query.press_sequentially("{ resource.servi")
        names = page.locator("#completions li")
        expect(names.first).to_contain_text("resource.service.name")
        query.press("Tab")
        expect(query).to_have_value("{ resource.service.name ")
        query.press_sequentially('= "ca')
        expect(names.first).to_contain_text("cart")
        query.press("Tab")
        expect(query).to_have_value('{ resource.service.name = "cart" ')

        # 3. A TraceQL search; its matched spans are listed, linked.
        query.fill('{ resource.service.name = "cart" && status = error }')
        query.press("Enter")
        expect(page).to_have_url(re.compile(r"#/\?q=.*status"))
        expect(rows).to_have_count(3)
        listed = rows.evaluate_all("rs => rs.map(r => r.dataset.traceId)")
        check(listed == [checkout[4], checkout[2], checkout[0]], f"errors in the cart: {listed}")
        expect(rows.first.locator("a.matched-span")).to_have_text("SELECT cart")
        expect(page.locator("#span-name option")).not_to_have_count(1)
        page.screenshot(path=os.path.join(shots, "ui-search.png"))

        # 4. The pickers write TraceQL for those who do not know it, and show
        # a query they could have written.
        expect(page.locator("#service")).to_have_value("cart")
        expect(page.locator("#errors-only")).to_be_checked()
        page.locator("#errors-only").uncheck()
        expect(query).to_have_value('{ resource.service.name = "cart" }')
        expect(rows).to_have_count(len(checkout))
        page.select_option("#service", "payments")
        expect(query).to_have_value('{ resource.service.name = "payments" }')
        expect(rows).to_have_count(len(checkout))
        page.select_option("#span-name", "late callback")
        expect(query).to_have_value('{ resource.service.name = "payments" && name = "late callback" }')
        expect(rows).to_have_count(1)

        # 5. A bad query: the parser's message and where.
        query.fill("{ status = }")
        query.press("Enter")
        expect(page.locator("#query-error-message")).to_contain_text("line 1, column 12")
        expect(page.locator("#query-error-where")).to_have_text("{ status = }\n           ^")

        # 6. A trace from the list: the tree, collapse and expand, details.
        page.goto(base + "/")
        page.locator(f'a[href="#/trace/{checkout[0]}"]').click()
        expect(page).to_have_url(re.compile(f"#/trace/{checkout[0]}$"))
        spans = page.locator("#rows .span-row")
        expect(spans).to_have_count(5)
        expect(page.locator("#trace-summary")).to_contain_text("5 spans")
        expect(page.locator("#trace-summary")).to_contain_text("1 error")
        names_in_order = spans.locator(".name").all_text_contents()
        check(
            names_in_order == ["GET /checkout", "POST /cart/checkout", "SELECT cart", "charge card", "render page"],
            f"tree order: {names_in_order}",
        )
        cart_call = spans.filter(has_text="POST /cart/checkout")
        cart_call.locator(".toggle").click()
        expect(spans).to_have_count(3)
        expect(cart_call).to_have_attribute("aria-expanded", "false")
        cart_call.locator(".toggle").click()
        expect(spans).to_have_count(5)
        expect(spans.filter(has_text="SELECT cart").locator(".badge.error")).to_be_visible()
        spans.filter(has_text="SELECT cart").click()
        details = page.locator("#details")
        expect(details.locator("h2")).to_have_text("SELECT cart")
        expect(details).to_contain_text("db.systempostgresql")
        expect(details).to_contain_text("error: timeout")
        expect(details).to_contain_text("retry")
        expect(details).to_contain_text("service.namecart")
        expect(details).to_contain_text("tracedb.ui-test")
        expect(page).to_have_url(re.compile(f"#/trace/{checkout[0]}\\?span="))

        # 7. A span's link leads to the span it names, in its trace.
        page.goto(f"{base}/#/trace/{checkout[1]}?span={ids['linking_span']}")
        expect(details.locator("h2")).to_have_text("charge card")
        details.locator("a.span-link").click()
        expect(page).to_have_url(re.compile(f"#/trace/{checkout[0]}\\?span={roots[0]}$"))
        expect(details.locator("h2")).to_have_text("GET /checkout")
        expect(page.locator("#rows .span-row.selected .name")).to_have_text("GET /checkout")

        # 8. The address survives a reload: the same trace, the same span.
        page.reload()
        expect(spans).to_have_count(5)
        expect(details.locator("h2")).to_have_text("GET /checkout")
        expect(page.locator("#trace-id")).to_have_text(checkout[0])

        # 9. A span whose parent is missing is shown, marked.
        page.goto(f"{base}/#/trace/{ids['orphan_trace']}")
        expect(spans).to_have_count(6)
        expect(spans.filter(has_text="late callback").locator(".badge.orphan")).to_have_text("missing parent")
        spans.filter(has_text="SELECT cart").click()
        expect(details.locator("h2")).to_have_text("SELECT cart")
        page.screenshot(path=os.path.join(shots, "ui-trace.png"))

        # 10. Span data is text: HTML and script in it show as typed and run nothing.
        page.goto(f"{base}/#/trace/{ids['hostile']}")
        expect(spans).to_have_count(1)
        expect(spans.first.locator(".name")).to_have_text("<script>window.__pwned=1</script>")
        spans.first.click()
        expect(details).to_contain_text('<img src=x onerror="window.__pwned=1">')
        expect(details).to_contain_text('<svg onload="window.__pwned=1">')
        page.goto(base + "/")
        expect(page.locator(f'#results-body tr[data-trace-id="{ids["hostile"]}"] td').nth(1)).to_have_text(
            '<img src=x onerror="window.__pwned=1"> service: <script>window.__pwned=1</script>'
        )
        page.wait_for_timeout(300)
        check(page.evaluate("window.__pwned") is None, "span data ran as script")
        check(dialogs == [], f"span data opened dialogs: {dialogs}")
        check(page.locator("img, svg, iframe, b").count() == 0, "span data became elements")

        # 11. A trace of 10,000 spans: a bounded number of rows in the document,
        # and scrolling to the end shows the last span.
        started = time.monotonic()
        page.goto(f"{base}/#/trace/{ids['big']}")
        expect(page.locator("#trace-summary")).to_contain_text(f"{ids['big_spans']} spans")
        opened = time.monotonic() - started
        count = spans.count()
        check(0 < count <= MAX_ROWS, f"{count} rows in the document for {ids['big_spans']} spans")
        page.locator("#rows").evaluate("r => { r.scrollTop = r.scrollHeight; }")
        last = spans.filter(has_text=ids["big_last"])
        expect(last).to_be_visible()
        check(spans.count() <= MAX_ROWS, f"{spans.count()} rows in the document after scrolling")
        page.locator("#rows").evaluate("r => { r.scrollTop = r.scrollHeight / 2; }")
        expect(spans.filter(has_text="item 49.")).not_to_have_count(0)
        page.locator("#collapse-all").click()
        expect(spans).to_have_count(1)
        page.locator("#expand-all").click()
        print(f"the 10,000-span trace opened in {opened:.2f} s with {count} rows in the document")

        # 12. An unknown trace ID, and a text that is no ID.
        page.goto(f"{base}/#/trace/0123456789abcdef0123456789abcdef")
        expect(page.locator("#trace-error")).to_contain_text("was not found")
        page.fill("#trace-id-input", "not-a-trace")
        page.press("#trace-id-input", "Enter")
        expect(page.locator("#trace-error")).to_contain_text("is not a trace ID")

        # 13. An unreachable server is named as such.
        page.goto(base + "/")
        expect(rows).not_to_have_count(0)
        page.route("**/api/**", lambda route: route.abort("connectionrefused"))
        page.locator("#search-button").click()
        expect(page.locator("#banner")).to_contain_text("Cannot reach the tracedb server")
        page.unroute("**/api/**")
        page.locator("#search-button").click()
        expect(page.locator("#banner")).to_be_hidden()

        # Read-only: the page only ever GETs, and only from its own origin.
        others = [(m, u) for m, u in requests if m != "GET" or not u.startswith(base)]
        check(others == [], f"requests other than GET to the server: {others}")
        check(problems == [], "errors in the page:\n" + "\n".join(problems))
        browser.close()
    print("ui_test: every check passed")


if __name__ == "__main__":
    main()
