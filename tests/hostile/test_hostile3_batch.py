"""Hostile pass 3 on A/B batches: an agent's batch_fly is checked as open_sitl and repro are
(an agent never makes the server read a file or run a program by naming its path), and every
option is checked before a batch directory is written or anything flies."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest

from conftest import wait_for
from mcp_client import ToolFailed, server
from sitlpool.batch import BatchError, batch_fly
from sitlpool.batch.runner import start_batch

pytestmark = pytest.mark.anyio

STEPS = [{"tool": "arm"}, {"hold_s": 1}]
AB = {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}}
SECRET = "TOPSECRET_LINE_hunter2"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def batch_dirs(data_dir) -> list[str]:
    d = data_dir / "batches"
    return sorted(os.listdir(d)) if d.is_dir() else []


async def test_batch_fly_over_mcp_never_reads_a_parameter_file_the_agent_names(env, data_dir, tmp_path):
    """open_sitl takes parameter files by name beside the presets file only (a parse error quotes
    a line of the file); batch_fly's variants read any path the agent names."""
    secret = tmp_path / "private.txt"
    secret.write_text(SECRET + "\n")
    async with server(env) as call:
        for given in (str(secret), "/etc/passwd"):
            with pytest.raises(ToolFailed) as e:
                await call("batch_fly", variants={"A": {}, "B": {"param_files": [given]}}, runs=1, steps=STEPS)
            msg = str(e.value)
            assert "hunter2" not in msg and "root:" not in msg, f"batch_fly read a file the agent named: {msg}"
            assert "param_files" in msg and "presets file" in msg, msg
    assert batch_dirs(data_dir) == []


@pytest.mark.below_256  # a configured binary is launched only below 256: here the program would run
async def test_batch_fly_over_mcp_runs_no_program_the_agent_names(env, data_dir, tmp_path):
    """A variant's binary is any executable the agent names: the server runs it (here a script
    that leaves a mark). An agent names no program unless SITLPOOL_ALLOW_PATHS=1."""
    mark = tmp_path / "ran"
    prog = tmp_path / "arducopter"
    prog.write_text(f"#!/bin/sh\ntouch {mark}\n")
    prog.chmod(0o755)
    async with server(env) as call:
        try:
            got = await call("batch_fly", variants={"A": {}, "B": {"binary": str(prog)}}, runs=1, steps=STEPS)
        except ToolFailed as e:
            got = None
            assert "binary" in str(e) and "SITLPOOL_ALLOW_PATHS" in str(e), str(e)
        if got is not None:  # accepted: follow it until the program ran or the batch ended
            for _ in range(200):
                st = await call("batch_status", batch_id=got["batch_id"])
                if mark.exists() or st["state"] != "running":
                    break
                await anyio.sleep(0.1)
            await call("abort_batch", batch_id=got["batch_id"])
    assert not mark.exists(), "batch_fly ran a program an agent named by its path"
    assert got is None, "batch_fly accepted a binary named by an agent"


def test_a_batch_home_by_name_flies(env, data_dir):
    """open_sitl, presets, the CLI and fleets take named homes (CMAC, list_presets lists them);
    batch_fly passes the name on unresolved and every run fails ("home 'CMAC' needs 4 numbers")."""
    got = batch_fly(AB, 1, [{"hold_s": 0.5}], home="CMAC", speedup=20, wait=True)
    assert not got["failures"], got["failures"]


@pytest.mark.parametrize(
    "option",
    [{"speedup": -5}, {"speedup": float("nan")}, {"speedup": 1e9}, {"home": "NOWHERE_AT_ALL"}, {"model": "glider"}],
    ids=["speedup-negative", "speedup-nan", "speedup-huge", "unknown-home", "unknown-model"],
)
def test_batch_options_are_checked_before_anything_flies(env, data_dir, option):
    """A bad speedup, home or model is one line at once, before a batch directory is written;
    not a batch whose every run fails on it."""
    with pytest.raises(BatchError) as e:
        batch_fly(AB, 1, STEPS, wait=True, **option)
    assert "\n" not in str(e.value) and next(iter(option)) in str(e.value)
    assert batch_dirs(data_dir) == [], "a batch was written (and flown) for options that cannot fly"


def test_abort_stops_runs_inside_a_long_step_as_abort_steps_does(env, data_dir):
    """abort_steps closes the run's session, so a step blocked in a tool call (arm waiting for a
    readiness that never comes: up to 27.5 s) ends at once; abort_batch only sets each run's
    abort event, which is looked at between steps and in holds: the batch runs on meanwhile."""
    steps = [{"tool": "inject_failure", "kind": "gps_loss"}, {"tool": "arm", "wait_ready_s": 600}]
    b = start_batch(AB, 1, steps, concurrency=2, speedup=5)
    try:
        wait_for(
            lambda: (
                (r := b._runs.get(None)) is not None
                and len(r.runs) == 2
                and all(x.result.current_step == 2 for x in list(r.runs.values()))
            ),
            60,
            interval=0.1,
            what="both runs inside their arm step",
        )
        b.abort()
        stopped = b.wait(timeout=15)
    finally:
        b.abort()
        b.wait(timeout=60)
    assert stopped, "abort_batch left the runs flying until their arm step gave up (their sessions stay open)"


@pytest.mark.parametrize("kind", ["fifo", "endless"])
def test_a_variant_parameter_file_that_is_no_file_is_refused_at_once(env, tmp_path, kind):
    """A variant's parameter file is read whole, unbounded and blocking (steps.recipe.read_param_file):
    a FIFO hangs batch_fly, /dev/zero eats memory until the process dies. open_sitl's files are
    checked as regular files of bounded size (process.paramfiles.parse_param_file); these must be too."""
    path = tmp_path / "fifo.parm" if kind == "fifo" else "/dev/zero"
    if kind == "fifo":
        os.mkfifo(path)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from sitlpool.batch import check_variants\n"
        "try:\n"
        "    check_variants({'A': {'param_files': [sys.argv[1]]}, 'B': {}})\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
        "except Exception as e:\n"
        "    print('refused:', e)\n"
    )
    try:
        r = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a variant's parameter file {path} ({kind}) hangs batch_fly")
    assert r.stdout.startswith("refused:") and str(path) in r.stdout, r.stdout + r.stderr[-500:]
