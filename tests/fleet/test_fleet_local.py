"""``Fleet()`` without an address: a Ray of this machine alone (a laptop), started by the
fleet with this machine's ``sitl`` resource, on loopback, and shut down with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import wait_for
from ray_cluster import session_pids
from sitlpool.instances import ports

pytest.importorskip("ray")

SCRIPT = textwrap.dedent("""
    import json, socket
    import ray
    from sitlpool.fleet import Fleet

    def say(**kw):
        print(json.dumps(kw), flush=True)

    with Fleet() as fleet:
        say(nodes=fleet.nodes(), capacity=fleet.capacity())
        s = fleet.open(speedup=10, label="laptop")
        say(instance=s.instance, host=s.host, serial1=s.endpoint("serial1"))
        s.set_mode("GUIDED"); s.arm(); s.takeoff(3)
        got = s.wait_until("altitude_above", 2.5, timeout_s=60)
        say(result=got["result"], alt=got["snapshot"]["vehicle"]["relative_alt_m"])
        # a GCS of this machine reaches it at the endpoint the handle gives
        host, port = s.endpoint("serial1").split(":")[1:]
        socket.create_connection((host, int(port)), timeout=10).close()
        s.close()
        say(closed=s.state)
    say(ray_running=ray.is_initialized())
""")


def test_fleet_without_an_address_starts_a_ray_of_this_machine_alone(env, instances, data_dir):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))  # Ray's socket paths must stay short
    pool = instances[:2]
    run_env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
    run_env.update(
        SITLPOOL_POOL=f"{pool[0]}-{pool[1]}",
        RAY_TMPDIR=str(ray_tmp),
        HOME=str(ray_tmp),
        RAY_USAGE_STATS_ENABLED="0",
        RAY_USE_RANDOM_PORTS="1",
    )
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=run_env,
        cwd=ray_tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=240)
    finally:
        try:  # ray.shutdown stops its services; give them a moment to go
            wait_for(lambda: not session_pids(p.pid), 20, 0.2, "the fleet's Ray to stop")
        except AssertionError:
            pass
        left = session_pids(p.pid)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait(10)
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert p.returncode == 0, err[-3000:]
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    first, opened, flew, closed, after = said
    # one node, this machine's pool as its sitl resource, on loopback
    assert [n["host"] for n in first["nodes"]] == ["127.0.0.1"] and first["nodes"][0]["sitl"] == 2
    assert first["capacity"] == [2, 2]
    assert opened["instance"] in pool and opened["host"] == "127.0.0.1"
    assert opened["serial1"] == f"tcp:127.0.0.1:{ports(opened['instance']).serial1}"
    assert flew["result"] == "met" and flew["alt"] >= 2.5
    assert closed["closed"] == "closed"
    assert after["ray_running"] is False  # the fleet shut down the Ray it started...
    assert not left, f"processes of the fleet's Ray outlived it: {left}"  # ... and all of it
