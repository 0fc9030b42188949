"""The commands that start a SITL take a preset, spelt alike: `sitlpool fly --preset` (with
--home, --param, --param-file, --wind over the program's options), `sitlpool run --preset`
(placeholders {model} {home} {speedup} {param_file}), `sitlpool sim --preset`, `sitlpool ab
--preset` and `sitlpool batch --preset` (under every variant / item); bad input one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import Gcs, wait_for
from sitlpool.leases import LeasePool

PRESETS = """
[cli-cmac]
description = "CMAC, a frame file, 10x"
home = "CMAC"
speedup = 10
param_files = ["frame.parm"]
params = { RTL_ALT = 1700 }

[cli-lua]
scripts = ["hello.lua"]
"""


@pytest.fixture
def conf(env, tmp_path, monkeypatch):
    d = tmp_path / "conf"
    d.mkdir()
    (d / "presets.toml").write_text(PRESETS)
    (d / "frame.parm").write_text("WPNAV_SPEED,750\n")
    monkeypatch.setenv("SITLPOOL_PRESETS", str(d / "presets.toml"))
    env = dict(os.environ)
    return env


def sitlpool(*args, env, timeout=120, **kw):
    """Run in the data dir: nothing a command starts writes into the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", *map(str, args)],
        env=env,
        cwd=env["SITLPOOL_DATA_DIR"],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def preset_files(env) -> list:
    d = os.path.join(env["SITLPOOL_DATA_DIR"], "preset-files")
    return [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs] if os.path.isdir(d) else []


def test_run_preset_fills_the_placeholders(conf):
    r = sitlpool(
        "run", "--preset", "cli-cmac", "--", "sh", "-c", "echo {model} {home} {speedup}; cat {param_file}", env=conf
    )
    assert r.returncode == 0, r.stderr
    first, *parm = r.stdout.splitlines()
    assert first.startswith("quad -35.36") and first.endswith(" 10")
    assert "WPNAV_SPEED 750" in parm and "RTL_ALT 1700" in parm  # the file's values, then the params
    assert not preset_files(conf)  # removed with the command
    r = sitlpool("run", "--preset", "cli-cmac", "--", "true", env=conf)
    assert r.returncode == 0 and "uses none of {model} {home}" in r.stderr


def test_bad_presets_are_one_line_and_lease_nothing(conf, tmp_path):
    r = sitlpool("run", "--preset", "cli-cmak", "--", "true", env=conf)
    assert r.returncode == 1 and r.stderr.startswith("sitlpool: unknown preset 'cli-cmak': did you mean cli-cmac")
    assert len(r.stderr.strip().splitlines()) == 1
    r = sitlpool("run", "--preset", "cli-lua", "--", "true", env=conf)
    assert r.returncode == 1 and "runs Lua scripts, which sitlpool run cannot place" in r.stderr
    prog = tmp_path / "hop.json"
    prog.write_text(json.dumps([{"hold_s": 1}]))
    r = sitlpool("fly", prog, "--preset", "cli-lua", env=conf)
    # fly takes a preset's Lua scripts: on the built-in vehicle that is one line, before anything is leased
    assert r.returncode == 1 and "Lua scripts run on real ArduPilot SITL only" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = sitlpool("fly", prog, "--param", "RTL_ALT", env=conf)
    assert r.returncode == 2 and "--param takes NAME=VALUE" in r.stderr
    r = sitlpool("sim", "--preset", "nope", env=conf)
    assert r.returncode == 1 and "unknown preset 'nope'" in r.stderr
    assert LeasePool.from_env().status() == [] and not preset_files(conf)


def test_fly_takes_a_preset_under_the_flags(conf, tmp_path):
    prog = tmp_path / "check.json"
    prog.write_text(json.dumps({"steps": [{"hold_s": 1}], "params": {"LAND_SPEED": 45}}))
    extra = tmp_path / "extra.parm"
    extra.write_text("PILOT_SPEED_UP 300\n")
    r = sitlpool(
        "fly", prog, "--preset", "cli-cmac", "--param", "RTL_ALT=1800", "--param-file", extra, "--wind", "4,90", "--json",
        env=conf, timeout=180,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    recipe = json.loads(open(doc["recipe"]).read())
    text = json.dumps(recipe)
    for expect in ('"RTL_ALT": 1800', '"LAND_SPEED": 45', '"WPNAV_SPEED": 750', '"PILOT_SPEED_UP": 300', "-35.36"):
        assert expect in text, (expect, recipe)


def test_sim_preset_boots_the_vehicle_with_it(conf, instances, procs, tmp_path):
    from sitlpool.instances import ports

    n = instances[0]
    cmd = [sys.executable, "-m", "sitlpool", "sim", "--preset", "cli-cmac", "-I", str(n)]
    p = procs.popen(cmd, env=conf, cwd=tmp_path)  # its eeprom.bin and logs/ there, not in the checkout
    gcs = Gcs(ports(n).serial0)
    try:
        gcs.heartbeat()
        seen = {}

        def read(name):
            gcs.m.mav.param_request_read_send(1, 1, name.encode(), -1)
            m = gcs.recv("PARAM_VALUE", 5, lambda m: m.param_id.rstrip("\x00") == name)
            if m is not None:
                seen[name] = m.param_value
            return m is not None

        for name in ("RTL_ALT", "WPNAV_SPEED", "SIM_SPEEDUP"):
            wait_for(lambda name=name: read(name), 20, 0.1, name)
        assert seen == {"RTL_ALT": 1700, "WPNAV_SPEED": 750, "SIM_SPEEDUP": 10}
        assert preset_files(conf)  # its parameter file lives while the vehicle runs
    finally:
        gcs.close()
        p.send_signal(signal.SIGTERM)
        p.wait(20)
    # the vehicle ends at once on SIGTERM (as SITL does): its folder is removed by the next --preset
    assert sitlpool("run", "--preset", "cli-cmac", "--", "true", env=conf).returncode == 0
    assert not preset_files(conf)


def test_ab_and_batch_take_a_preset_under_every_variant(conf):
    from sitlpool.cli import parser
    from sitlpool.cli._common import preset_variants
    from sitlpool.cli.ab import VARIANT_KEYS

    got = preset_variants(
        "cli-cmac", {"A": {"params": {"RTL_ALT": 1500}}, "B": {"param_files": ["b.parm"]}}, VARIANT_KEYS
    )
    assert (
        got["A"]["params"] == {"RTL_ALT": 1500} and got["A"]["home"].startswith("-35.36") and got["A"]["speedup"] == 10
    )
    assert got["B"]["params"] == {"RTL_ALT": 1700} and got["B"]["param_files"][1] == "b.parm"
    assert got["B"]["param_files"][0].endswith("conf/frame.parm")
    a = parser().parse_args(["batch", "s.py", "--preset", "cli-cmac"])
    assert a.preset == "cli-cmac" and a.model is None
    a = parser().parse_args(["ab", "--a", "x", "--b", "y", "--runs", "2", "--steps", "s", "--preset", "cli-cmac"])
    assert a.preset == "cli-cmac"
