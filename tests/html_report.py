"""Snakemake's HTML report (``snakemake --report report.html``) opened in a real browser, as a
reader would: Debian's ``chromium`` (``make test`` installs it), driven by Playwright's Python
API with that executable (``executable_path``; Playwright's own browsers are never
downloaded). tests/test_workflow.py opens the report of its finished pipeline with it.

:func:`browse` loads the file with every request refused but for the file itself and the
browser's own (the report holds everything inline), records every console error, uncaught
exception, refused request and dialog, then clicks through the report's menu: each category,
each result's view button (a figure must be drawn with a size, report.pdf shown in its frame, a
table's link must hold the file's bytes) and each result's information (its caption and job
parameters, as shown). An injected script is seen by what it would do: set
``window.cbInjected`` (:attr:`Shown.injected`), open a dialog, or load an image that is not
there (a refused request).
"""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_to_bytes

#: The names Debian's chromium package (and others) install the browser under.
CHROMIUM_NAMES = ("chromium", "chromium-browser")

#: The browser's own resources (its PDF viewer shows report.pdf with them), never the network.
BROWSER_OWN = ("chrome://", "chrome-extension://")

#: How long one step in the page may take (ms): generous, 2 busy cores.
STEP_MS = 30_000


def chromium() -> str | None:
    """The path of the system's chromium, or None."""
    return next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)


def data_uri_bytes(uri: str) -> bytes:
    """The bytes a ``data:`` URI holds (base64 or percent-encoded)."""
    head, _, data = uri.partition(",")
    assert head.startswith("data:"), uri[:80]
    return base64.b64decode(data) if head.endswith(";base64") else unquote_to_bytes(data)


@dataclass
class Shown:
    """What the report showed, by result path (its key in the report's ``results``)."""

    results: list[str] = field(default_factory=list)
    figures: dict[str, tuple[int, int]] = field(default_factory=dict)  # drawn size
    documents: dict[str, bytes] = field(default_factory=dict)  # a frame's content (report.pdf)
    tables: dict[str, bytes] = field(default_factory=dict)  # what the view link holds
    info: dict[str, str] = field(default_factory=dict)  # the result's information panel text
    captions: dict[str, str] = field(default_factory=dict)  # the caption's HTML
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, requests
    dialogs: list[str] = field(default_factory=list)
    #: window.cbInjected: what an injected script would have set (None: nothing ran)
    injected: object = None


def watch(page, shown: Shown, url: str) -> None:
    """Record on ``shown`` every console error, uncaught exception and dialog of ``page``, and
    refuse (and record) every request but for ``url``, the report's own file (and the
    browser's own: its PDF viewer's)."""
    page.on("console", lambda msg: msg.type == "error" and shown.errors.append(msg.text))
    page.on("pageerror", lambda exc: shown.errors.append(f"uncaught: {exc}"))

    def dialog(d):
        shown.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)

    def route(r):
        if r.request.url == url or r.request.url.startswith(BROWSER_OWN):
            return r.continue_()
        shown.errors.append(f"request: {r.request.url[:200]}")
        return r.abort()

    page.route("**/*", route)


def show_result(page, row, path: str, mime: str, shown: Shown) -> None:
    """Click ``row``'s view button and check what the report shows for it."""
    view, info = row.locator("td").last.locator("a").all()[:2]
    if mime.startswith("image/"):
        view.click()
        img = page.locator(f'img[src="{page.evaluate("p => results[p].data_uri", path)}"]')
        img.wait_for(timeout=STEP_MS)
        size = img.evaluate("i => i.decode().then(() => [i.naturalWidth, i.naturalHeight])")
        shown.figures[path] = tuple(size)
    elif mime in ("application/pdf", "text/html"):
        view.click()
        frame = page.locator("iframe").first
        frame.wait_for(timeout=STEP_MS)
        shown.documents[path] = data_uri_bytes(frame.get_attribute("src"))
    else:  # a table: a link to the file, downloaded as it is
        shown.tables[path] = data_uri_bytes(view.get_attribute("href"))
    info.click()
    page.get_by_text("Job parameters").wait_for(timeout=STEP_MS)
    shown.info[path] = page.locator("#app").inner_text()
    shown.captions[path] = page.evaluate("p => results[p].caption", path)


def open_category(page, category: str):
    """The rows of ``category``'s results, opened from the report's menu."""
    page.evaluate("() => app.setView({navbarMode: 'menu'})")
    page.get_by_role("link", name=category, exact=True).click()
    rows = page.locator("table tbody tr")
    rows.first.wait_for(timeout=STEP_MS)
    return rows


def show_category(page, category: str, shown: Shown) -> None:
    """Open ``category`` from the menu and show each of its results."""
    paths = [
        row.locator("td").first.inner_text().strip() for row in open_category(page, category).all()
    ]
    for number, path in enumerate(paths):
        row = open_category(page, category).nth(number)
        assert row.locator("td").first.inner_text().strip() == path
        mime = page.evaluate("p => results[p].mime_type", path)
        show_result(page, row, path, mime, shown)


def browse(html: Path, executable: str) -> Shown:
    """Open ``html`` in ``executable`` (chromium) and show every result of every category."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    shown = Shown()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page()
            url = html.resolve().as_uri()
            watch(page, shown, url)
            page.goto(url, timeout=STEP_MS)
            try:  # a broken report stops where it breaks: each step says where
                page.locator("#loading-screen").wait_for(state="hidden", timeout=STEP_MS)
                shown.results = page.evaluate("() => Object.keys(window.results ?? {})")
                for category in page.evaluate("() => Object.keys(window.categories ?? {})"):
                    show_category(page, category, shown)
            except PlaywrightTimeout as exc:
                shown.errors.append(f"the report broke: {exc.message.splitlines()[0]}")
            shown.injected = page.evaluate("() => window.cbInjected ?? null")
        finally:
            browser.close()
    return shown
