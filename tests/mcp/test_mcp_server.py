"""The MCP server through the real MCP client over stdio."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession

from conftest import Gcs, listening, start_sim, wait_for
from mcp_client import Client, ToolFailed, server
from sitlpool import procinfo
from sitlpool.instances import ports
from sitlpool.leases import LeasePool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_full_hop(env, instances, tmp_path):
    async with server(env) as call:
        info = await call("server_info")
        assert info["pool"] == instances and info["reaped_at_start"] == []
        s = await call("open_sitl", label="hop-test", speedup=10)
        sid, n = s["session_id"], s["instance"]
        assert len(sid) == 6 and int(sid, 16) >= 0 and n == instances[0]
        assert s["connect"]["serial1"] == f"tcp:127.0.0.1:{ports(n).serial1}"
        h = LeasePool(env["SITLPOOL_DATA_DIR"] + "/leases", instances).holder(n)
        assert h.owner == f"sitlpool session {sid} (hop-test)"
        w = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=40)
        assert w["result"] == "met" and w["snapshot"]["vehicle"]["ready_to_arm"] is True
        assert w["snapshot"]["vehicle"]["not_ready_because"] == []
        await call("set_mode", session_id=sid, mode="GUIDED")
        await call("arm", session_id=sid)
        await call("takeoff", session_id=sid, altitude_m=10)
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=9.5, timeout_s=30)
        assert w["result"] == "met" and w["snapshot"]["vehicle"]["relative_alt_m"] >= 9.5
        snap = await call("snapshot", session_id=sid)
        v = snap["vehicle"]
        assert v["mode"] == "GUIDED" and v["armed"] and v["gps_fix_type"] >= 3 and v["heartbeat_age_s"] < 3
        assert snap["state"] == "running" and snap["pid"] > 0
        lat, lon = v["lat"] + 20 / 111320, v["lon"]
        await call("goto", session_id=sid, lat=lat, lon=lon, altitude_m=10)
        w = await call("wait_until", session_id=sid, condition="reached", value=2, timeout_s=30)
        assert w["result"] == "met"
        await call("land", session_id=sid)
        w = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=50)
        assert w["result"] == "met" and w["snapshot"]["vehicle"]["relative_alt_m"] < 0.5
        assert await call("get_param", session_id=sid, name="RTL_ALT") == {"name": "RTL_ALT", "value": 1500}
        closed = await call("close_sitl", session_id=sid)
        assert "lease released" in closed["closed"]
        assert not procinfo.is_alive(snap["pid"])
        assert LeasePool(env["SITLPOOL_DATA_DIR"] + "/leases", instances).holder(n) is None


async def test_two_servers_never_share(env, instances):
    async with server(env) as a, server(env) as b:
        sa = await a("open_sitl", label="agent-a", speedup=5)
        sb = await b("open_sitl", label="agent-b", speedup=5)
        assert sa["instance"] != sb["instance"]
        seen_by_b = {h["instance"]: h for h in (await b("list_instances"))["leased"]}
        assert seen_by_b[sa["instance"]]["owner"] == f"sitlpool session {sa['session_id']} (agent-a)"
        assert seen_by_b[sb["instance"]]["this_server_session"] == sb["session_id"]
        assert seen_by_b[sa["instance"]]["this_server_session"] is None
        with pytest.raises(
            ToolFailed, match=f"instance {sa['instance']} is leased to sitlpool session {sa['session_id']}"
        ):
            await b("kill_instance", instance=sa["instance"])
        with pytest.raises(ToolFailed, match="unknown session"):
            await b("snapshot", session_id=sa["session_id"])
        lease = await b("lease_instance", owner="my own launcher")
        assert lease["instance"] not in (sa["instance"], sb["instance"])
        with pytest.raises(ToolFailed, match="leased to"):
            await a("lease_instance", owner="x", instance=lease["instance"])
        await b("release_instance", instance=lease["instance"])
        free = (await a("list_instances", all=True))["free"]
        assert lease["instance"] in free


async def test_server_exit_cleans_up(env, instances):
    async with server(env) as call:
        s = await call("open_sitl", speedup=5)
        pid = s["pid"]
    # stdin closed: the server killed its SITL and released its lease
    wait_for(lambda: not procinfo.is_alive(pid), what="SITL gone after the server exited")
    assert LeasePool(env["SITLPOOL_DATA_DIR"] + "/leases", instances).status() == []


async def test_sigterm_and_idle_sessions_clean_up(env, instances):
    e = dict(env, SITLPOOL_IDLE_TIMEOUT_S="1")
    async with server(e) as call:
        s = await call("open_sitl", speedup=5)
        wait_for(lambda: not procinfo.is_alive(s["pid"]), timeout=15, what="the idle session to close itself")
        assert await call("list_sessions") == []
        s = await call("open_sitl", speedup=5)
        info = await call("server_info")
        os.kill(info["pid"], signal.SIGTERM)
        wait_for(lambda: not procinfo.is_alive(s["pid"]), what="SITL gone after SIGTERM of its server")
        wait_for(lambda: not procinfo.is_alive(info["pid"]), what="the server to exit")
    assert LeasePool(env["SITLPOOL_DATA_DIR"] + "/leases", instances).status() == []


async def test_lost_vehicle_is_one_log_line_and_a_died_session(env, tmp_path):
    log = tmp_path / "server.log"
    with open(log, "w") as errlog:
        async with server(env, errlog=errlog) as call:
            s = await call("open_sitl", speedup=5, label="doomed")
            os.kill(s["pid"], signal.SIGKILL)
            w = await call(
                "wait_until", session_id=s["session_id"], condition="altitude_above", value=100, timeout_s=20
            )
            assert w["result"] == "died" and w["snapshot"]["state"] == "died"
            assert w["snapshot"]["status"]["signal"] == signal.SIGKILL
            await anyio.sleep(2)  # time for any spam to show
            snap = await call("snapshot", session_id=s["session_id"])
            assert snap["state"] == "died"
    lines = [ln for ln in log.read_text().splitlines() if s["session_id"] in ln]
    assert len(lines) <= 1, lines


async def test_sigkilled_server_leaves_nothing(env, instances):
    lock_dir = env["SITLPOOL_DATA_DIR"] + "/leases"
    try:
        async with server(env) as call:
            info = await call("server_info")
            s = await call("open_sitl", speedup=5)
            n, sitl_pid = s["instance"], s["pid"]
            os.kill(info["pid"], signal.SIGKILL)
            wait_for(lambda: not procinfo.is_alive(info["pid"]), what="server dead")
    except Exception:
        pass  # the client notices its server vanished
    async with server(env) as call:
        await call("server_info")
        wait_for(lambda: not procinfo.is_alive(sitl_pid), what="the old SITL gone")
        lease = await call("lease_instance", owner="after the crash", instance=n)
        assert lease["instance"] == n
    assert LeasePool(lock_dir, instances).status() == []


async def test_attach_is_read_only_and_close_leaves_it_flying(env, procs, tmp_path, instances):
    n = instances[3]
    sim = start_sim(procs, tmp_path / "foreign", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial1))
    async with server(env) as call:
        found = {d["instance"]: d for d in (await call("list_instances"))["running_without_lease"]}
        assert found[n]["pid"] == sim.pid  # (other tests' vehicles may show up too)
        a = await call("attach_sitl", instance=n, label="watcher")
        assert a["read_only"] and a["kind"] == "unmanaged" and a["pid"] == sim.pid
        with pytest.raises(ToolFailed, match="read-only"):
            await call("arm", session_id=a["session_id"])
        with pytest.raises(ToolFailed, match="read-only"):
            await call("set_param", session_id=a["session_id"], name="RTL_ALT", value=3000)
        snap = await call("snapshot", session_id=a["session_id"])
        assert snap["vehicle"]["mode"] == "STABILIZE"
        closed = await call("close_sitl", session_id=a["session_id"])
        assert "left running" in closed["closed"]
        with pytest.raises(ToolFailed, match="exactly one of instance or endpoint"):
            await call("attach_sitl")
    assert sim.poll() is None and owner.heartbeat()
    owner.close()


async def test_bad_arguments_get_clear_errors(env, instances):
    async with server(env) as call:
        with pytest.raises(ToolFailed, match="unknown session 'nope'"):
            await call("snapshot", session_id="nope")
        with pytest.raises(ToolFailed, match="built-in vehicle is a copter only .*model 'glider' is a plane"):
            await call("open_sitl", model="glider")
        assert (await call("list_instances"))["leased"] == [], "nothing leaked by the failed launch"
        s = await call("open_sitl", speedup=5)
        sid = s["session_id"]
        with pytest.raises(ToolFailed, match="unknown mode 'FLYBYWIRE'.*GUIDED"):
            await call("set_mode", session_id=sid, mode="FLYBYWIRE")
        with pytest.raises(ToolFailed, match="altitude -5.0 m must be above 0"):
            await call("takeoff", session_id=sid, altitude_m=-5)
        with pytest.raises(ToolFailed, match="NO_SUCH_PARAM.*no such parameter"):
            await call("get_param", session_id=sid, name="NO_SUCH_PARAM")
        with pytest.raises(ToolFailed, match="unknown condition 'flying'"):
            await call("wait_until", session_id=sid, condition="flying")
        with pytest.raises(ToolFailed, match="instance 0 belongs to ArduPilot"):
            await call("kill_instance", instance=0)
        with pytest.raises(ToolFailed, match="not leased through lease_instance"):
            await call("release_instance", instance=instances[0])
        with pytest.raises(ToolFailed, match="takeoff needs the vehicle armed: arm first"):
            await call("takeoff", session_id=sid, altitude_m=10)
        tools = {t.name: t for t in (await call.session.list_tools()).tools}
        assert tools["snapshot"].annotations.read_only_hint is True
        assert tools["kill_instance"].annotations.destructive_hint is True
        assert "binary" not in json.dumps(tools["open_sitl"].input_schema), "agents never choose what runs"


def test_http_refuses_non_loopback(env):
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "serve", "--http", "8765", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "refusing to serve MCP over HTTP on 0.0.0.0" in r.stderr


async def test_http_on_loopback(env, procs, instances):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from sitlpool.ports import read_sockets

    port = 20000 + instances[0] % 1000  # a port no other test uses at the same time
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "serve", "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: any(s.local_port == port for s in read_sockets(("tcp",))), timeout=30, what="HTTP listening")
    listeners = [s for s in read_sockets(("tcp",)) if s.local_port == port]
    assert listeners and all(s.local_addr in ("127.0.0.1", "::1") for s in listeners), listeners
    token_file = Path(env["SITLPOOL_DATA_DIR"]) / "http" / f"serve-{port}.token"
    token = wait_for(lambda: token_file.exists() and token_file.read_text().strip(), what="the token file")
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            info = await Client(session)("server_info")
            assert info["pool"] == instances
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) is not None


# ---- issue 12: hostile arguments, another holder's vehicle, a long-lived server --------------


async def test_values_that_would_crash_a_vehicle_are_refused(env, instances):
    async with server(env) as call:
        for home in ("1000,1000,0,0", "-35.36,149.16,nan,0", "1,2,3", "-35.36,149.16,584,1e308"):
            with pytest.raises(ToolFailed, match="home"):
                await call("open_sitl", home=home)
        with pytest.raises(ToolFailed, match="home latitude 1000 degrees is out of range; use from -90 to 90"):
            await call("open_sitl", home="1000,1000,0,0")
        with pytest.raises(ToolFailed, match="built-in vehicle is a copter only.*plane.*SITLPOOL_SITL_BINARY"):
            await call("open_sitl", model="plane")
        with pytest.raises(ToolFailed, match="parameter RTL_ALT inf is not a finite number"):
            await call("open_sitl", params={"RTL_ALT": "inf"})
        assert (await call("list_instances"))["leased"] == [], "nothing launched for a refused request"
        sid = (await call("open_sitl", speedup=5))["session_id"]
        for bad in ("NaN", "inf", "-inf"):
            with pytest.raises(ToolFailed, match="not a finite number"):
                await call("set_param", session_id=sid, name="RTL_ALT", value=bad)
        assert (await call("get_param", session_id=sid, name="RTL_ALT"))["value"] == 1500
        for alt in ("NaN", 1e308, "inf"):
            with pytest.raises(ToolFailed, match="goto altitude"):
                await call("goto", session_id=sid, lat=-35.36, lon=149.16, altitude_m=alt)
            with pytest.raises(ToolFailed, match="takeoff altitude"):
                await call("takeoff", session_id=sid, altitude_m=alt)
        with pytest.raises(ToolFailed, match="goto latitude 91 degrees is out of range"):
            await call("goto", session_id=sid, lat=91, lon=0, altitude_m=10)
        snap = await call("snapshot", session_id=sid)
        assert snap["state"] == "running" and not snap["vehicle"]["armed"]


async def test_owner_label_and_instance_are_checked_first_and_taken_ports_are_not_free(env, instances):
    import socket

    n = instances[5]
    stray = socket.socket()  # an unleased process holding instance n's SERIAL0 port
    stray.bind(("127.0.0.1", ports(n).serial0))
    stray.listen()
    async with server(env) as call:
        doc = await call("list_instances", all=True)
        assert n not in doc["free"] and instances[0] in doc["free"]
        taken = {d["instance"]: d for d in doc["ports_taken"]}
        assert taken[n]["state"] == "ports taken" and str(ports(n).serial0) in " ".join(taken[n]["busy_ports"])
        for owner in ("", "   "):
            with pytest.raises(ToolFailed, match="a lease needs an owner"):
                await call("lease_instance", owner=owner)
        with pytest.raises(ToolFailed, match="owner is 300 characters long; give at most 200"):
            await call("lease_instance", owner="x" * 300)
        with pytest.raises(ToolFailed, match="label is 201 characters long"):
            await call("open_sitl", label="y" * 201)
        with pytest.raises(ToolFailed, match="label"):
            await call("attach_sitl", instance=instances[0], label="   ")
        with pytest.raises(ToolFailed, match="instance -3 is negative"):
            await call("attach_sitl", instance=-3)
        with pytest.raises(ToolFailed, match="instance -3 is negative"):
            await call("lease_instance", owner="me", instance=-3)
        assert (await call("list_instances"))["leased"] == []
    stray.close()


async def test_control_of_another_holders_vehicle_needs_force(env, procs, tmp_path, instances, lock_dir):
    from conftest import hold_lease

    n = instances[4]
    hold_lease(procs, lock_dir, n, "agent A's flight")
    sim = start_sim(procs, tmp_path / "a", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial1))
    log = tmp_path / "server.log"
    with open(log, "w") as errlog:
        async with server(env, errlog=errlog) as call:
            with pytest.raises(ToolFailed, match=f"instance {n} is leased to agent A's flight pid .*force=True"):
                await call("attach_sitl", instance=n, control=True)
            with pytest.raises(ToolFailed, match=f"instance {n} is leased to agent A's flight"):
                await call("attach_sitl", endpoint=f"tcp:127.0.0.1:{ports(n).serial1}", control=True)
            ro = await call("attach_sitl", instance=n)  # watching stays allowed
            assert ro["read_only"]
            await call("close_sitl", session_id=ro["session_id"])
            a = await call("attach_sitl", instance=n, control=True, force=True)
            assert not a["read_only"]
            await call("close_sitl", session_id=a["session_id"])
    assert f"control of instance {n} forced" in log.read_text()
    assert sim.poll() is None
    owner.close()


def test_closed_sessions_are_dropped_and_never_read_as_died(env, instances):
    import threading

    from sitlpool.sessions import Sessions

    sessions = Sessions()
    sessions.start()
    try:
        for _ in range(2):
            s = sessions.open(speedup=5)
            seen: set[str] = set()
            done = threading.Event()

            def watch():
                while not done.is_set():
                    seen.update(x.state for x in list(sessions.sessions.values()))

            t = threading.Thread(target=watch)
            t.start()
            try:
                sessions.close_idle(idle_s=0)
            finally:
                done.set()
                t.join()
            assert "died" not in seen, seen
            assert s.id not in sessions.sessions, "a closed session is kept"
    finally:
        sessions.close_all()
