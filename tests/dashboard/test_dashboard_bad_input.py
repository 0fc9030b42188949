"""Bad input on the dashboard: HTML and script in a holder's name or a STATUSTEXT are shown
as text and never run; forged or corrupt state files are marked unreadable rows and never
crash it; another address than loopback needs the token; a page elsewhere cannot reach the
loopback dashboard through a name of its own (DNS rebinding)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from dashboard_page import browser, dashboard, get_json, shot, wait_text  # noqa: F401  (fixtures)

from conftest import hold_lease, wait_for
from sitlpool.dashboard import vehicle_facts
from sitlpool.dashboard.serve import DashboardError, token_for

SCRIPT_OWNER = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">agent'
HTML_TEXT = '<img src=x onerror="window.pwned=3"><b>PreArm: bold</b>'


def state(instance: int, writer_pid: int, **fields) -> dict:
    return {
        "schema": 1,
        "instance": instance,
        "writer_pid": writer_pid,
        "writer_start_ticks": 0,
        "time": round(time.time(), 3),
        "link": "connected",
        "mode": "GUIDED",
        "armed": False,
        "relative_alt_m": 0.0,
        **fields,
    }


def plant(data_dir, instance: int, content: str | bytes) -> None:
    d = data_dir / "sessions" / str(instance)
    d.mkdir(parents=True, exist_ok=True)
    (d / "state.json").write_bytes(content.encode() if isinstance(content, str) else content)


def status(url: str, path: str = "/", headers: dict | None = None) -> tuple[int, str, dict]:
    req = urllib.request.Request(url.split("?")[0].rstrip("/") + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def test_script_in_holder_and_statustext_is_text(
    env, data_dir, lock_dir, instances, procs, dashboard, browser, tmp_path
):  # noqa: F811
    a, b = instances[0], instances[1]
    holder = hold_lease(procs, lock_dir, a, SCRIPT_OWNER)
    plant(data_dir, a, json.dumps(state(a, holder.pid, mode="<i>GUIDED</i>", last_text=HTML_TEXT, texts=[HTML_TEXT])))
    plant(data_dir, b, b"{not json <script>window.pwned=4</script>")
    url, _ = dashboard()
    browser.goto(url)
    row = f'#pool tr.held[data-instance="{a}"]'
    wait_text(browser, f"{row} td.holder", lambda t: t == SCRIPT_OWNER, what="the holder's name as text")
    card = f'.vehicle[data-instance="{a}"]'
    wait_text(browser, f"{card} ul.texts li", lambda t: t == HTML_TEXT, what="the STATUSTEXT as text")
    wait_text(browser, f"{card} dd.mode", lambda t: t == "<i>GUIDED</i>")
    unreadable = wait_text(browser, "#pool tr.unreadable td.sitl", lambda t: f"sessions/{b}/state.json" in t)
    assert "unreadable" in unreadable or "not" in unreadable, unreadable
    browser.wait_for_timeout(1500)  # a few updates: still nothing run
    assert browser.evaluate("window.pwned") is None
    assert browser.locator("#pool img, .vehicle ul.texts img, .vehicle b, .vehicle i, #pool script").count() == 0
    assert browser.locator("#conn").text_content() == "live"
    shot(browser, tmp_path / "hostile.png")
    assert not browser.errors  # type: ignore[attr-defined]


BAD_FILES: dict[str, bytes] = {
    "garbage": b"\x00\xff garbage",
    "nan": b'{"schema":1,"writer_pid":1,"writer_start_ticks":0,"time":NaN}',
    "huge altitude": b'{"schema":1,"writer_pid":1,"writer_start_ticks":0,"time":1,"relative_alt_m":'
    + b"9" * 400
    + b"}",
    "deep": b"[" * 100000,
    "big": b" " * 300000,
    "array": b"[1,2,3]",
}


def test_corrupt_and_forged_state_files_are_rows_never_a_crash(env, data_dir, instances, dashboard):  # noqa: F811
    me = os.getpid()
    instances = [instances[0] + i for i in range(len(BAD_FILES) + 3)]  # state files only: no port is used
    for i, content in enumerate(BAD_FILES.values()):
        plant(data_dir, instances[i], content)
    n = instances[len(BAD_FILES)]
    # a valid file whose extra fields are junk: the junk is dropped, the rest shown
    junk = state(n, me, lat="x", lon=1e308, texts=[1, {"a": 1}, "ok"], home="abc", waypoints=[[1e308, 2], [1, 2]])
    plant(data_dir, n, json.dumps(junk))
    fifo = data_dir / "sessions" / str(instances[len(BAD_FILES) + 1])
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "state.json")  # a reader that opened it would hang
    link = data_dir / "sessions" / str(instances[len(BAD_FILES) + 2])
    link.mkdir(parents=True)
    (link / "state.json").symlink_to("/etc/passwd")
    url, proc = dashboard()

    def doc() -> dict | None:
        d = get_json(url, "/api/state")
        return d if len(d["unreadable"]) >= len(BAD_FILES) + 2 and d["vehicles"] else None

    d = wait_for(doc, 20, 0.2, "the bad files listed as unreadable")
    text = "\n".join(d["unreadable"])
    for i in range(len(BAD_FILES) + 3):
        if i != len(BAD_FILES):
            assert f"sessions/{instances[i]}/state.json" in text, (i, text)
    [v] = d["vehicles"]
    assert v["instance"] == n and "lat" not in v and "lon" not in v and v["home"] is None
    assert v["texts"] == ["ok"] and v["waypoints"] == [[1.0, 2.0]]
    assert proc.poll() is None
    code, body, _ = status(url, "/")
    assert code == 200 and "sitlpool dashboard" in body


def test_non_loopback_needs_the_token_and_says_so(env, dashboard):  # noqa: F811
    url, proc = dashboard("0.0.0.0")
    assert "?token=" in url
    base = url.split("?")[0]
    token = url.split("?token=")[1]
    code, body, _ = status(base, "/api/state")
    assert code == 401 and "token" in body
    code, _, headers = status(base, "/events?token=wrong")
    assert code == 401
    code, _, headers = status(base, f"/api/state?token={token}")
    assert code == 200 and "HttpOnly" in headers.get("set-cookie", "")
    code, _, _ = status(base, "/api/state", {"Authorization": f"Bearer {token}"})
    assert code == 200
    code, _, _ = status(base, "/api/state", {"Cookie": f"sitlpool_dashboard={token}"})
    assert code == 200


def test_the_token_line_and_a_weak_token_refused():
    assert token_for("127.0.0.1") == (None, "")
    assert token_for("::1")[0] is None
    tok, line = token_for("0.0.0.0", {})
    assert tok and len(tok) >= 32 and "not loopback" in line and "SITLPOOL_DASHBOARD_TOKEN" in line
    assert token_for("10.1.2.3", {"SITLPOOL_DASHBOARD_TOKEN": "x" * 40})[0] == "x" * 40
    with pytest.raises(DashboardError, match="at least 32"):
        token_for("0.0.0.0", {"SITLPOOL_DASHBOARD_TOKEN": "short"})


def test_loopback_answers_only_to_a_loopback_name(env, dashboard):  # noqa: F811
    url, _ = dashboard()
    code, _, headers = status(url, "/")
    assert code == 200 and "script-src 'self'" in headers["content-security-policy"]
    code, body, _ = status(url, "/api/state", {"Host": "attacker.example:8765"})
    assert code == 421 and "127.0.0.1" in body


def test_vehicle_facts_keeps_only_typed_extras():
    v = vehicle_facts(
        {
            "instance": 3,
            "mode": "LOITER",
            "lat": -35.0,
            "lon": "149",
            "ready_to_arm": "yes",
            "gps_satellites": True,
            "not_ready_because": "PreArm: " + "x" * 1000,
            "fence": [{"lat": 1, "lon": 2}, "x", [91, 0]],
            "last_text": "hello",
        }
    )
    assert v["lat"] == -35.0 and "lon" not in v and "ready_to_arm" not in v and "gps_satellites" not in v
    assert len(v["not_ready_because"]) == 300 and v["fence"] == [[1.0, 2.0]] and v["texts"] == ["hello"]
