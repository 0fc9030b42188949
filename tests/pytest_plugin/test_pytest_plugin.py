"""The pytest plugin, run through pytester in subprocesses (as a user's suite would)."""

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import wait_for
from sitlpool import procinfo
from sitlpool.leases import LeasePool


@pytest.fixture
def suite(pytester, env, instances):
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def run(pytester, *args, timeout=240):
    return pytester.runpytest_subprocess("-p", "no:randomly", *args, timeout=timeout)


FLY = """
import pytest

def test_hop(sitl):
    assert sitl.ready and sitl.instance is not None
    sitl.arm_and_takeoff(5)
    assert sitl.vehicle.rel_alt >= 4.5
    sitl.link.land()
    sitl.wait_disarmed()

@pytest.mark.sitl(speedup=7, params={"RTL_ALT": 2500})
def test_marker(sitl):
    assert sitl.link.get_param("RTL_ALT") == 2500
    assert sitl.link.get_param("SIM_SPEEDUP") == 7

def test_swarm(sitl_factory):
    swarm = [sitl_factory() for _ in range(3)]
    assert len({s.instance for s in swarm}) == 3
    assert all(s.vehicle.last_heartbeat for s in swarm)

def test_lease(sitl_lease):
    from sitlpool.leases import LeasePool
    h = LeasePool.from_env().holder(sitl_lease.instance)
    assert "test_lease" in h.owner and "[lease]" in h.owner

def test_attached_skips_without_option(attached_sitl):
    pass
"""


def test_fixtures_fly_and_clean_up(suite, instances):
    suite.makepyfile(test_fly=FLY)
    r = run(suite, "--sitl-speedup", "10", "--sitl-pool", f"{instances[0]}-{instances[3]}")
    r.assert_outcomes(passed=4, skipped=1)
    assert LeasePool.from_env().status() == []


def test_failure_report_shows_instance_texts_and_stderr(suite, instances):
    suite.makepyfile(
        test_fail="""
def test_boom(sitl):
    sitl.wait(lambda v: any("is using GPS" in t for _, _, t in v.texts), 30)
    assert False, "deliberate"
"""
    )
    r = run(suite, "--sitl-speedup", "10", "--sitl-pool", str(instances[0]))
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "sitlpool: test_boom-0" in out and f"instance {instances[0]}" in out
    assert "last STATUSTEXTs:" in out and "EKF3 IMU0 is using GPS" in out
    assert "tail of the SITL's stderr:" in out and f"bind port {5760 + 10 * instances[0]} for SERIAL0" in out


def test_attached_sitl_option(suite, procs, tmp_path, instances):
    from conftest import listening, start_sim
    from sitlpool.instances import ports

    n = instances[2]
    sim = start_sim(procs, tmp_path / "v", n, "--serial0", "tcp:0", "--speedup", 5)
    wait_for(lambda: listening(ports(n).serial1))
    suite.makepyfile(
        test_att="""
import pytest
from sitlpool.errors import ReadOnlyLink

def test_watch(attached_sitl):
    assert attached_sitl.vehicle.mode == "STABILIZE"
    with pytest.raises(ReadOnlyLink):
        attached_sitl.link.arm()
"""
    )
    r = run(suite, "--sitl-attach", str(n))
    r.assert_outcomes(passed=1)
    assert sim.poll() is None


RECORD = """
import json, os, time
def record(sitl, tag):
    t0 = time.time()
    time.sleep(0.4)
    with open(os.environ["RECORD_FILE"], "a") as f:
        f.write(json.dumps({"instance": sitl.instance, "t0": t0, "t1": time.time(), "tag": tag, "pid": sitl.pid}) + "\\n")
"""


def _no_overlap(rows):
    by_instance = {}
    for r in rows:
        by_instance.setdefault(r["instance"], []).append((r["t0"], r["t1"]))
    for spans in by_instance.values():
        spans.sort()
        for (_a0, a1), (b0, _b1) in zip(spans, spans[1:]):
            assert b0 >= a1, f"two SITLs on one instance at once: {spans}"


def test_xdist_queues_on_a_small_pool(suite, instances, tmp_path, monkeypatch):
    rec = tmp_path / "record.jsonl"
    monkeypatch.setenv("RECORD_FILE", str(rec))
    suite.makepyfile(helper=RECORD)
    suite.makepyfile(
        test_many="from helper import record\n"
        + "".join(f"def test_{i}(sitl):\n    record(sitl, {i})\n" for i in range(8))
    )
    r = run(
        suite, "-n", "4", "--sitl-pool", f"{instances[0]}-{instances[2]}", "--sitl-wait", "120", "--sitl-speedup", "5"
    )
    r.assert_outcomes(passed=8)
    rows = [json.loads(x) for x in rec.read_text().splitlines()]
    assert len(rows) == 8 and {r["instance"] for r in rows} <= set(instances[:3])
    _no_overlap(rows)


def test_two_suites_at_once_share_one_lock_dir(suite, instances, tmp_path, env):
    rec = tmp_path / "record.jsonl"
    suite.makepyfile(helper=RECORD)
    suite.makepyfile(
        test_a="from helper import record\n"
        + "".join(f"def test_{i}(sitl):\n    record(sitl, 'a{i}')\n" for i in range(3))
    )
    suite.makepyfile(
        test_b="from helper import record\n"
        + "".join(f"def test_{i}(sitl):\n    record(sitl, 'b{i}')\n" for i in range(3))
    )
    e = dict(env, RECORD_FILE=str(rec))
    args = [
        "--sitl-pool",
        f"{instances[0]}-{instances[1]}",
        "--sitl-wait",
        "120",
        "--sitl-speedup",
        "5",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    a = subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_a.py", *args],
        cwd=suite.path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    b = subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_b.py", *args],
        cwd=suite.path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out_a, out_b = a.communicate(240), b.communicate(240)
    finally:
        for p in (a, b):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert a.returncode == 0 and b.returncode == 0, out_a[0] + out_b[0]
    rows = [json.loads(x) for x in rec.read_text().splitlines()]
    assert len(rows) == 6
    _no_overlap(rows)


def test_killed_worker_leaves_nothing_running(suite, instances, tmp_path, procs, env, data_dir):
    info = tmp_path / "info.json"
    suite.makepyfile(
        test_hang=f"""
import json, os, time
def test_hang(sitl):
    with open({str(info)!r}, "w") as f:
        json.dump({{"worker": os.getpid(), "sitl": sitl.pid, "instance": sitl.instance}}, f)
    time.sleep(120)
"""
    )
    p = procs.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "1",
            "--sitl-pool",
            str(instances[0]),
            "-p",
            "no:cacheprovider",
            "-q",
            "-x",
        ],
        cwd=suite.path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: info.exists() and info.read_text().endswith("}"), timeout=60, what="the worker's SITL")
    d = json.loads(info.read_text())
    assert procinfo.is_alive(d["sitl"])
    os.kill(d["worker"], signal.SIGKILL)
    wait_for(lambda: not procinfo.is_alive(d["sitl"]), timeout=10, what="the killed worker's SITL to exit")
    wait_for(lambda: LeasePool.from_env().holder(d["instance"]) is None, timeout=10, what="the lease to be free")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def test_ini_keys(pytester, env, instances):
    pytester.makeini(f"[pytest]\naddopts = -p no:cacheprovider\nsitl_pool = {instances[4]}\nsitl_speedup = 9\n")
    pytester.makepyfile(
        test_ini=f"""
def test_it(sitl):
    assert sitl.instance == {instances[4]}
    assert sitl.link.get_param("SIM_SPEEDUP") == 9
"""
    )
    run(pytester).assert_outcomes(passed=1)
