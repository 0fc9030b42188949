"""`sitlpool logs` end to end, as subprocesses: a real flight's log named by its path, kept
logs named by id (list with filters, show, path, pin, prune with its dry run), fields,
message pages, compare and picture; --json for scripts; bad input gets one line and exit 1
(usage errors exit 2); a log's own text cannot drive the terminal; the CLI starts without
the log reader."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sitlpool.cli import parser

HOP = (
    Path(__file__).resolve().parents[2].parent / "shared" / "logs" / "copter-hop.BIN"
)  # a real ArduCopter hop: GUIDED takeoff to ~10 m, LAND


def _registered() -> bool:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return "logs" in sub.choices


pytestmark = [
    pytest.mark.skipif(not _registered(), reason="`sitlpool logs` is not registered in sitlpool.cli yet"),
    pytest.mark.quick,
]


@pytest.fixture
def hop() -> Path:
    if not HOP.is_file():
        pytest.skip(f"the real log {HOP} is not here")
    return HOP


def logs(*args, env, check: int | None = 0) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "logs", *map(str, args)],
        env=dict(env, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-2000:]}"
    return r


def one_line_error(r: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """Exit ``code``, nothing on stdout, one line on stderr holding ``words``, no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


def keep_logs(data_dir: Path, tmp: Path, hop: Path, n: int, size: int = 150_000) -> list[str]:
    """``n`` kept logs (the hop's first ``size`` bytes: a truncated but readable log), session
    ``s-<i>``, label ``even``/``odd``, ended ``n - i`` hours ago; ids oldest first."""
    from sitlpool.logs import LogStore

    store = LogStore(data_dir)
    head = hop.read_bytes()[:size]
    ids = []
    now = time.time()
    for i in range(n):
        src = tmp / f"{i:08d}.BIN"
        src.write_bytes(head)
        ended = now - (n - i) * 3600
        os.utime(src, (ended, ended))  # not "being written": prune may take it
        rec = store.keep(src, {"session": f"s-{i}", "label": "even" if i % 2 == 0 else "odd", "end": ended})
        ids.append(rec.id)
    return ids


def test_show_a_real_flights_log_by_its_path(env, hop):
    doc = json.loads(logs("show", "--json", hop, env=env).stdout)
    assert doc["id"] is None and doc["path"] == str(hop) and doc["vehicle"] == "ArduCopter"
    assert [m["mode"] for m in doc["modes"]] == ["GUIDED", "LAND"]
    assert "takeoff" in [p["phase"] for p in doc["phases"]]
    assert 9 < doc["altitude"]["max"] < 11
    assert doc["end"]["status"] == "truncated"  # the SITL was killed mid-write: read up to the damage
    assert any(m["text"] == "Arming motors" for m in doc["messages"])
    out = logs("show", hop, env=env).stdout
    for word in ("ArduCopter", "takeoff", "GUIDED", "LAND", "Arming motors", "warning: log truncated"):
        assert word in out, word


def test_kept_logs_listed_shown_pinned_and_pruned(env, data_dir, tmp_path, hop):
    ids = keep_logs(data_dir, tmp_path, hop, 23)
    doc = json.loads(logs("list", "--json", env=env).stdout)
    assert doc["total"] == 23 and [r["id"] for r in doc["logs"]] == ids[::-1][:20]  # newest first, 20 by default
    doc = json.loads(logs("list", "--json", "--all", env=env).stdout)
    assert [r["id"] for r in doc["logs"]] == ids[::-1]
    text = logs("list", env=env).stdout
    assert ids[-1] in text and ids[2] not in text and "3 older logs not shown: --all lists them" in text
    assert ids[0] in logs("list", "--all", env=env).stdout
    got = json.loads(logs("list", "--json", "--session", "s-4", env=env).stdout)["logs"]
    assert [r["id"] for r in got] == [ids[4]]
    got = json.loads(logs("list", "--json", "--label", "odd", "--since", "5h", env=env).stdout)["logs"]
    assert [r["id"] for r in got] == [ids[21], ids[19]]  # ended 2 h and 4 h ago
    assert "no kept logs" in logs("list", "--session", "nobody", env=env).stdout

    oldest = ids[0]
    path = logs("path", oldest, env=env).stdout.strip()
    assert Path(path).is_file() and path.startswith(str(data_dir / "logs"))
    assert json.loads(logs("path", "--json", oldest, env=env).stdout) == {"id": oldest, "path": path}
    shown = json.loads(logs("show", "--json", oldest, env=env).stdout)
    assert shown["id"] == oldest and shown["path"] == path and shown["vehicle"] == "ArduCopter"
    assert f"log {oldest}: {path}" in logs("show", oldest, env=env).stdout

    assert json.loads(logs("pin", "--json", oldest, env=env).stdout)["pinned"] is True
    assert "pinned" in logs("pin", oldest, env=env).stdout
    size = Path(path).stat().st_size
    budget = size * 5.5 / 1e6  # room for 5 logs: the pinned one and the 4 newest
    dry = json.loads(logs("prune", "--json", "--dry-run", "--budget-mb", budget, env=env).stdout)
    would = [r["id"] for r in dry["deleted"]]
    assert dry["dry_run"] and would == ids[1:19]  # oldest first, never the pinned one
    assert json.loads(logs("list", "--json", "--all", env=env).stdout)["total"] == 23  # nothing deleted
    assert "would delete 18 logs" in logs("prune", "--dry-run", "--budget-mb", budget, env=env).stdout
    done = json.loads(logs("prune", "--json", "--budget-mb", budget, env=env).stdout)
    assert [r["id"] for r in done["deleted"]] == would and done["usage_after"] <= budget * 1e6
    left = [r["id"] for r in json.loads(logs("list", "--json", env=env).stdout)["logs"]]
    assert left == [*ids[19:][::-1], oldest] and Path(path).is_file()
    assert "nothing to prune" in logs("prune", "--budget-mb", budget, env=env).stdout
    assert json.loads(logs("unpin", "--json", oldest, env=env).stdout)["pinned"] is False


def test_fields_messages_compare_and_picture(env, tmp_path, hop):
    doc = json.loads(logs("fields", "--json", hop, "CTUN.Alt", "BAT.Volt", "--max-points", 40, env=env).stdout)
    alt = doc["fields"]["CTUN.Alt"]
    assert alt["unit"] == "m" and alt["downsampled"] and len(alt["t"]) <= 40 < alt["count"]
    assert 9 < max(alt["v"]) < 11  # the peak is kept
    assert doc["fields"]["BAT.Volt"]["unit"] == "V"
    part = json.loads(logs("fields", "--json", hop, "CTUN.Alt", "--from", 50, "--to", 55, env=env).stdout)
    assert all(50 <= t <= 55 for t in part["fields"]["CTUN.Alt"]["t"])
    out = logs("fields", hop, "CTUN.Alt", "--max-points", 10, env=env).stdout.splitlines()
    assert out[0].startswith("CTUN.Alt (m): ") and "max 9.68" in out[0] and len(out) <= 1 + 10 + 1

    page = json.loads(logs("messages", "--json", hop, "MODE", env=env).stdout)
    assert [m["ModeNum"] for m in page["messages"]] == [4, 4, 9] and not page["more"]
    page = json.loads(logs("messages", "--json", hop, "MODE", "--offset", 1, "--limit", 1, env=env).stdout)
    assert [m["ModeNum"] for m in page["messages"]] == [4] and page["more"]
    text = logs("messages", hop, "MODE", "--limit", 2, env=env).stdout
    assert "MODE Mode=4 ModeNum=4" in text and "more: --offset 2 for the next page" in text

    cut = tmp_path / "cut.BIN"
    cut.write_bytes(hop.read_bytes()[:1_000_000])  # the same flight, killed 20 s earlier
    cmp = json.loads(logs("compare", "--json", hop, cut, env=env).stdout)
    assert "duration" in {d["what"] for d in cmp["differences"]} and "modes" in cmp["same"]
    assert "differences:" in logs("compare", hop, cut, env=env).stdout
    assert json.loads(logs("compare", "--json", hop, hop, env=env).stdout)["differences"] == []

    png = tmp_path / "alt.png"
    out = json.loads(logs("picture", "--json", hop, "CTUN.Alt", "BAT.Volt", "-o", png, env=env).stdout)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out["bytes"] == png.stat().st_size


def test_bad_input_gets_one_line(env, tmp_path, hop):
    e = one_line_error(logs("fields", hop, "CTUN.Altt", env=env, check=None), 1, "sitlpool: ", "no field Altt", "Alt")
    assert "CTUN fields" in e
    one_line_error(logs("messages", hop, "NOPE", env=env, check=None), 1, "no message type NOPE", "MODE")
    one_line_error(logs("fields", hop, "CTUN.Alt", "--from", 1000, env=env, check=None), 1, "outside the log")
    not_bin = tmp_path / "notes.BIN"
    not_bin.write_text("not a log\n")
    one_line_error(logs("show", not_bin, env=env, check=None), 1, "is not a DataFlash log")
    one_line_error(logs("show", tmp_path / "missing.BIN", env=env, check=None), 1, "neither a kept log's id nor a file")
    one_line_error(logs("show", tmp_path, env=env, check=None), 1, "neither a kept log's id nor a file")
    one_line_error(logs("show", "20261201-124301-a1b2c3", env=env, check=None), 1, "no kept log", "sitlpool logs list")
    one_line_error(logs("pin", "../../etc/passwd", env=env, check=None), 1, "give a kept log's id")
    one_line_error(logs("unpin", "x", env=env, check=None), 1, "not a log id")
    one_line_error(logs("pin", hop, env=env, check=None), 1, "is a file", "kept log's id")
    one_line_error(logs("picture", hop, "CTUN.Alt", "-o", tmp_path / "no" / "x.png", env=env, check=None), 1)
    one_line_error(logs("show", "--json", hop, env=dict(env, SITLPOOL_LOG_BUDGET_MB="lots"), check=None), 1)
    for args, word in (
        (("messages", hop, "MODE", "--limit", 0), "--limit"),
        (("fields", hop, "CTUN.Alt", "--max-points", 10**9), "--max-points"),
        (("fields", hop, "CTUN.Alt", "--from", "nan"), "--from"),
        (("list", "--since", "yesterday"), "--since"),
        (("prune", "--budget-mb", "-1"), "--budget-mb"),
        (("picture", hop, "CTUN.Alt"), "-o"),
        ((), "logs"),
    ):
        one_line_error(logs(*args, env=env, check=None), 2, word)


def test_a_logs_text_cannot_drive_the_terminal(env, tmp_path, hop):
    """MSG texts come from whoever wrote the log: escape sequences are dropped, rich markup shown as text."""
    data = hop.read_bytes()
    assert data.count(b"New rally") == 1 and data.count(b"New fence") == 1
    planted = tmp_path / "planted.BIN"
    planted.write_bytes(data.replace(b"New rally", b"\x1b]0;pw\x07ly").replace(b"New fence", b"[red]ence"))
    out = logs("show", planted, env=env).stdout
    assert "\x1b" not in out and "\x07" not in out and "[red]ence" in out
    out = logs("messages", planted, "MSG", env=env).stdout
    assert "\x1b" not in out and "[red]ence" in out
    texts = [m["text"] for m in json.loads(logs("show", "--json", planted, env=env).stdout)["messages"]]
    assert "\x1b]0;pw\x07ly" in texts  # scripts get the log's text as it is


def test_the_cli_starts_without_the_log_reader(env):
    """`sitlpool logs` is wired without importing sitlpool.logs (pymavlink: ~90 ms) or rich."""
    probe = (
        "import sys\nfrom sitlpool.cli import parser\nparser().parse_args(['logs', 'list'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pymavlink', 'rich') or m == 'sitlpool.logs'))"
    )
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    r = subprocess.run(
        [str(Path(sys.executable).parent / "sitlpool"), "logs", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and json.loads(r.stdout)["total"] == 0, r.stderr
