"""Anyone sharing the data directory can plant files: `status` shows what it cannot read and
never fails with a traceback (`sessions/²`, a state file with a huge integer altitude...)."""

import json
import os
import subprocess
import sys
import time

import pytest

from sitlpool import procinfo


def status(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", "status", *args], env=env, capture_output=True, text=True, timeout=60
    )


def state(instance, **fields):
    me = os.getpid()
    doc = {
        "schema": 1,
        "instance": instance,
        "sitl_pid": None,
        "writer_pid": me,
        "writer_start_ticks": procinfo.start_ticks(me),
        "time": time.time(),
        "link": "connected",
        "mode": "GUIDED",
        "armed": False,
        "relative_alt_m": 1.0,
        "battery_pct": 90,
    }
    doc.update(fields)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "plant",
    [
        "superscript dir",
        "arabic digits dir",
        "leading zero dir",
        "huge altitude",
        "huge battery",
        "huge negative voltage",
        "huge time",
        "huge writer ticks",
    ],
)
def test_status_never_fails_on_planted_files(env, data_dir, instances, plant):
    sessions = data_dir / "sessions"
    sessions.mkdir()
    n = instances[0]
    if plant.endswith("dir"):
        name = {"superscript dir": "²", "arabic digits dir": "٤٠", "leading zero dir": f"0{n}"}[plant]
        (sessions / name).mkdir()
        (sessions / name / "state.json").write_text(state(n))
    else:
        field, value = {
            "huge altitude": ("relative_alt_m", 10**400),
            "huge battery": ("battery_pct", 10**30),
            "huge negative voltage": ("battery_v", -(10**300)),
            "huge time": ("time", 10**400),
            "huge writer ticks": ("writer_start_ticks", 10**30),
        }[plant]
        (sessions / str(n)).mkdir()
        (sessions / str(n) / "state.json").write_text(state(n, **{field: value}))
    for args in ((), ("--json",), ("--json", "--all")):
        r = status(env, *args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(status(env, "--json").stdout)
    assert doc["live"] == []
    if plant in ("superscript dir", "arabic digits dir"):
        assert any("not an instance number" in u for u in doc["unreadable"]), doc["unreadable"]
    elif plant != "leading zero dir":
        assert any("state.json" in u for u in doc["unreadable"]), doc["unreadable"]
        assert "unreadable" in status(env).stdout


def test_a_good_state_file_is_still_shown(env, data_dir, instances):
    n = instances[0]
    (data_dir / "sessions" / str(n)).mkdir(parents=True)
    (data_dir / "sessions" / str(n) / "state.json").write_text(state(n, relative_alt_m=12.5))
    doc = json.loads(status(env, "--json").stdout)
    assert [(d["instance"], d["relative_alt_m"]) for d in doc["live"]] == [(n, 12.5)]
    assert doc["unreadable"] == []
    assert "12.5 m" in status(env).stdout
