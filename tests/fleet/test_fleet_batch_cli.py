"""``sitlpool batch`` as a script consumes it: a bad ``--speedup`` is a usage error before Ray
starts, and stdout carries the JSON lines of the results and nothing else, even when a
scenario's worker dies (Ray's "(raylet) A worker died..." goes to stderr). Also: a Fleet
connected to the loopback cluster leaves Ray's own functions as they were."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group(
    "fleet_b"
)  # a second worker and its own shared cluster for half the fleet modules (--dist loadgroup)

from ray_cluster import session_pids  # noqa: E402

OK_FILE = "def items():\n    return [1]\n\ndef run(sitl, item):\n    return item\n"

DYING = """
import os, time

def items():
    return ["ok", "dies", "slow"]

def run(sitl, item):
    print("a scenario's own print")
    if item == "dies":
        os._exit(3)  # the worker process dies under the item
    if item == "slow":
        time.sleep(4)
    return {"item": item, "instance": sitl.instance}
"""


def run_cli(env, *args, timeout=120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "sitlpool", *args],
        env=env,
        cwd=env["SITLPOOL_DATA_DIR"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        for pid in session_pids(p.pid):  # a Ray the command started, if it did
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.poll() is None:
            p.kill()
            p.wait(10)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), time.monotonic() - t0


@pytest.mark.parametrize("speedup", ["nan", "-5", "1e400", "0", "inf", "fast"])
@pytest.mark.parametrize("ray_arg", [[], ["--ray", "127.0.0.1:1"]], ids=["this machine", "a cluster"])
def test_a_bad_speedup_is_a_usage_error_before_ray_starts(env, tmp_path, speedup, ray_arg):
    (tmp_path / "ok.py").write_text(OK_FILE)
    env = {**env, "RAY_TMPDIR": str(tmp_path), "HOME": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0"}
    r, took = run_cli(env, "batch", str(tmp_path / "ok.py"), "--speedup", speedup, *ray_arg)
    assert r.returncode == 2, (r.returncode, r.stderr[-1000:])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "speedup" in lines[0] and repr(speedup) in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert took < 10, f"{took:.1f}s: Ray was started before the arguments were checked"


@pytest.fixture
def cluster(fleet_cluster):
    return fleet_cluster


def test_batch_stdout_is_json_lines_only_when_a_worker_dies(cluster, env, tmp_path):
    (tmp_path / "dying.py").write_text(DYING)
    r, _ = run_cli(env, "batch", str(tmp_path / "dying.py"), "--ray", cluster.address, "--speedup", "10", timeout=240)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    out = r.stdout.splitlines()
    lines = []
    for x in out:
        try:
            lines.append(json.loads(x))
        except ValueError:
            pytest.fail(f"stdout holds a line that is not a result: {x!r} (all of stdout: {r.stdout[-2000:]!r})")
    assert [x["index"] for x in lines] == [0, 1, 2]
    assert lines[0]["ok"] and lines[2]["ok"]
    assert not lines[1]["ok"] and lines[1]["type"] == "Lost", lines[1]
    assert "a scenario's own print" not in r.stdout


def test_a_fleet_leaves_rays_own_functions_in_place(cluster):
    """The loopback patch is applied while a connection is made, not for the process's life."""
    import ray._private.services as services

    assert ray.is_initialized() and cluster.fleet.capacity()[0] >= 1
    assert services.resolve_ip_for_localhost.__module__ == "ray._private.services"
    assert services.resolve_ip_for_localhost("127.0.0.1") != "127.0.0.1" or not _has_routable_address()


def _has_routable_address() -> bool:
    from ray._private.services import get_node_ip_address

    return get_node_ip_address() != "127.0.0.1"
