"""Reads a server with tenancy (--tenancy header) in the trace viewer
(headless Chromium, Playwright for Python): the page asks for a tenant when
the server refuses a request without one, and once one is given lists that
tenant's traces and no other's; another tenant, or two as a|b, read again.

Usage: ui_tenant_test.py BASE_URL TRACE_A TRACE_B

Exits non-zero, naming the check, when one fails. Chromium is the one at
$TRACEDB_TEST_CHROMIUM, else /usr/bin/chromium.
"""

import os
import sys

from playwright.sync_api import expect, sync_playwright

from ui_test import ARGS


def listed(page):
    return set(page.locator("#results-body tr").evaluate_all("rs => rs.map(r => r.dataset.traceId)"))


def main():
    base, trace_a, trace_b = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("TRACEDB_TEST_CHROMIUM", "/usr/bin/chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(base + "/")
        # Refused without a tenant: the page asks for one.
        expect(page.locator("#tenant-form")).to_be_visible()
        expect(page.locator("#results-body tr")).to_have_count(0)

        page.locator("#tenant-input").fill("team-a")
        page.locator("#tenant-form button").click()
        rows = page.locator("#results-body tr")
        expect(rows).to_have_count(1)
        if listed(page) != {trace_a}:
            sys.exit(f"team-a lists {listed(page)}, not only {trace_a}")

        # The tenant is kept across a reload, and another reads again.
        page.reload()
        expect(page.locator("#tenant-input")).to_have_value("team-a")
        expect(rows).to_have_count(1)
        page.locator("#tenant-input").fill("team-b")
        page.locator("#tenant-form button").click()
        expect(page.locator(f'#results-body tr[data-trace-id="{trace_b}"]')).to_have_count(1)
        expect(rows).to_have_count(1)
        page.locator("#tenant-input").fill("team-a|team-b")
        page.locator("#tenant-form button").click()
        expect(rows).to_have_count(2)

        # A trace of the tenant opens; another tenant's is not found.
        page.locator("#tenant-input").fill("team-a")
        page.locator("#tenant-form button").click()
        page.goto(f"{base}/#/trace/{trace_a}")
        expect(page.locator("#trace-body")).to_be_visible()
        page.goto(f"{base}/#/trace/{trace_b}")
        expect(page.locator("#trace-view")).to_contain_text("not found")
        browser.close()
    print("tenants: every check passed")


if __name__ == "__main__":
    main()
