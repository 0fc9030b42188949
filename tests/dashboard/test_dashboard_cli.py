"""``sitlpool dashboard``: prints its URL and serves the page; another address prints the
token line and a URL with the token; a weak SITLPOOL_DASHBOARD_TOKEN, a taken port or a map
tile URL that is not one (``--tiles`` or SITLPOOL_DASHBOARD_TILES) is one line and exit 1,
never a traceback."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import urllib.request

import pytest

CLI = [sys.executable, "-m", "sitlpool"]


def start(procs, env, *args: str) -> tuple[str, list[str], subprocess.Popen]:
    p = procs.popen([*CLI, "dashboard", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    while True:
        line = p.stdout.readline()
        assert line, f"sitlpool dashboard exited: {lines} {p.stderr.read()}"
        lines.append(line.rstrip("\n"))
        if line.startswith("sitlpool dashboard: "):
            return line.split()[2], lines, p


def test_prints_its_url_and_serves_the_page(procs, env):
    url, lines, _ = start(procs, env, "--port", "0")
    assert url.startswith("http://127.0.0.1:") and "token" not in url and len(lines) == 1
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200 and b"sitlpool dashboard" in r.read()
    with urllib.request.urlopen(url + "static/app.js", timeout=10) as r:
        assert b"textContent" in r.read()


def test_another_address_says_it_needs_the_token(procs, env):
    url, lines, _ = start(procs, env, "--host", "0.0.0.0", "--port", "0")
    assert "not loopback" in lines[0] and "token" in lines[0] and "?token=" in url


@pytest.mark.parametrize("case", ["weak token", "port taken", "bad tiles", "bad tiles variable"])
def test_refusals_are_one_line(procs, env, case):
    extra: dict[str, str] = {}
    args = ["--port", "0"]
    s = socket.socket()
    if case == "weak token":
        extra = {"SITLPOOL_DASHBOARD_TOKEN": "short"}
        args += ["--host", "0.0.0.0"]
    elif case == "bad tiles":
        args += ["--tiles", "https://tile.example.org/{z}/{x}.png"]  # no {y}
    elif case == "bad tiles variable":
        extra = {"SITLPOOL_DASHBOARD_TILES": "javascript:alert(1)//{z}/{x}/{y}"}
    else:
        s.bind(("127.0.0.1", 0))
        s.listen()
        args = ["--port", str(s.getsockname()[1])]
    try:
        r = subprocess.run(
            [*CLI, "dashboard", *args], env=dict(env, **extra), capture_output=True, text=True, timeout=60
        )
    finally:
        s.close()
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    want = {"weak token": "at least 32", "port taken": "cannot listen", "bad tiles": "lacks {y}"}
    assert want.get(case, "is not an http(s) URL") in r.stderr


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://tile.example.org/{z}/{x}/{y}.png", None),
        ("http://127.0.0.1:8080/t/{z}/{x}/{y}", None),
        ("https://tile.example.org/{z}/{x}/{y}.png'; script-src *", "is not a URL"),
        ("https://user:pw@tile.example.org/{z}/{x}/{y}.png", "not an http(s) URL of a host"),
        ("https://tile.example.org/{s}/{z}/{x}/{y}.png", "placeholder other than"),
        ("file:///etc/{z}/{x}/{y}", "not an http(s) URL of a host"),
        ("https://tile.example.org:port/{z}/{x}/{y}", "bad port"),
    ],
)
def test_tile_urls_are_checked_before_anything_starts(url, why):
    from sitlpool.dashboard import tile_url
    from sitlpool.dashboard.serve import DashboardError

    if why is None:
        got, origin = tile_url(url)
        assert got == url and url.startswith(origin) and origin.count("/") == 2
    else:
        with pytest.raises(DashboardError, match=re.escape(why)):
            tile_url(url)
