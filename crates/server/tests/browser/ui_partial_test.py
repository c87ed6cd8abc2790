"""Opens a trace in the trace viewer (headless Chromium, Playwright for
Python) on a query tier one of whose nodes did not answer, and checks that
the page says the trace is partial and names why, above the spans it has;
and that the metrics page says the same of its charts.

Usage: ui_partial_test.py BASE_URL TRACE_ID NODE_ADDR

Exits non-zero, naming the check, when one fails. Chromium is the one at
$TRACEDB_TEST_CHROMIUM, else /usr/bin/chromium.
"""

import os
import sys

from playwright.sync_api import expect, sync_playwright

from ui_test import ARGS


def main():
    base, trace, node = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("TRACEDB_TEST_CHROMIUM", "/usr/bin/chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(f"{base}/#/trace/{trace}")
        warning = page.locator("#trace-warning")
        expect(warning).to_be_visible()
        expect(warning).to_contain_text("Partial trace")
        # The reason names the node that did not answer.
        expect(warning).to_contain_text(node)
        # The spans that were read are shown.
        expect(page.locator("#trace-body")).to_be_visible()

        # The metrics page says its charts are partial, and why.
        page.goto(f"{base}/#/metrics?range=1h")
        warning = page.locator("#metrics-warning")
        expect(warning).to_be_visible()
        expect(warning).to_contain_text("Partial results")
        expect(warning).to_contain_text(node)
        browser.close()
    print("partial trace: every check passed")


if __name__ == "__main__":
    main()
