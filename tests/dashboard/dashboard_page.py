"""The dashboard tests' helpers: a dashboard process, and a headless Chromium to read its page
(fixtures imported by the test modules)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

SERVE = """
import sys
from sitlpool.dashboard import serve
serve(host=sys.argv[1], port=0)
"""


def chromium_path() -> str | None:
    for p in (os.environ.get("SITLPOOL_TEST_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if p and os.access(p, os.X_OK):
            return p
    return None


@pytest.fixture
def dashboard(procs, env):
    """Start ``sitlpool.dashboard.serve`` on a free port in a child process; yields ``(url, proc)``."""

    def start(host: str = "127.0.0.1", extra_env: dict | None = None) -> tuple[str, subprocess.Popen]:
        p = procs.python(
            SERVE, host, env=dict(env, **(extra_env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines = []
        while True:
            line = p.stdout.readline()
            if not line:
                raise AssertionError(f"the dashboard exited: {lines} {p.stderr.read()}")
            lines.append(line)
            if line.startswith("sitlpool dashboard: "):
                return line.split()[2], p

    return start


def get_json(url: str, path: str) -> dict:
    base = url.split("?")[0].rstrip("/")
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def browser():
    """A headless Chromium page driven by Playwright; skips with one line without them."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright for Python (pip install playwright; apt-get install -y chromium)")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium (apt-get install -y chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.errors = errors  # type: ignore[attr-defined]  # the test reads the page's script errors
            yield page
        finally:
            b.close()


def wait_text(page, selector: str, pred, timeout: float = 20.0, what: str = "") -> str:
    """The text of ``selector`` once ``pred(text)`` holds (polling the page as a person would look)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        loc = page.locator(selector)
        if loc.count():
            last = loc.first.text_content()
            if last is not None and pred(last):
                return last
        page.wait_for_timeout(200)
    raise AssertionError(f"timed out waiting for {what or selector}; last text {last!r}")


def shot(page, path: Path) -> Path:
    page.screenshot(path=str(path), full_page=True)
    return path
