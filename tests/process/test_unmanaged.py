"""Unmanaged SITLs: a "foreign" built-in vehicle started by a separate parent, no lease."""

import inspect
import logging
import os
import signal
import threading
import time

import pytest

from conftest import Gcs, listening, start_sim, wait_for
from sitlpool.errors import ReadOnlyLink, ResolveError
from sitlpool.instances import ports
from sitlpool.process import ManagedSitl, SitlManager, SitlProcess, UnmanagedManager, UnmanagedSitl, discover
from sitlpool.process import unmanaged as um


def public_api(cls):
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        kind = type(attr).__name__
        sig = str(inspect.signature(getattr(cls, name))) if callable(getattr(cls, name)) else ""
        out[name] = (kind, sig)
    return out


def test_same_api_for_both_kinds():
    m, u = public_api(ManagedSitl), public_api(UnmanagedSitl)
    assert m == u
    for name in (
        "spawn",
        "wait_running",
        "kill",
        "join",
        "status",
        "verify_threads_state",
        "endpoint",
        "pid",
        "instance",
        "ports",
        "host_id",
        "on_localhost",
        "ready",
        "alive",
        "running",
        "dead",
        "name",
    ):
        assert hasattr(ManagedSitl, name) or name == "name"
    assert issubclass(UnmanagedSitl, SitlProcess) and issubclass(ManagedSitl, SitlProcess)


@pytest.fixture
def foreign(procs, tmp_path, instances):
    """A vehicle someone else started (separate process group, no lease) with its owner on SERIAL0."""
    n = instances[0]
    sim = start_sim(procs, tmp_path / "foreign", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial2))
    yield n, sim, owner
    owner.close()


@pytest.fixture
def manager(env):
    m = UnmanagedManager()
    yield m
    m.close_all()


def test_attach_by_instance_picks_free_ports(foreign, manager):
    n, sim, owner = foreign
    a = manager.start("a", instance=n)
    assert a.ready and a.pid == sim.pid and a.instance == n and a.ports == ports(n)
    assert a.link.endpoint == f"tcp:127.0.0.1:{ports(n).serial1}", "never SERIAL0 unless asked"
    assert a.link.vehicle.mode == "STABILIZE" and a.link.read_only
    b = manager.start("b", instance=n)
    assert b.link.endpoint == f"tcp:127.0.0.1:{ports(n).serial2}"
    with pytest.raises(ResolveError) as e:
        manager.start("c", instance=n, timeout=1)
    msg = str(e.value)
    assert f"instance {n} has no free serial port" in msg and f"pid {os.getpid()}" in msg
    assert "c" not in manager.processes
    assert owner.heartbeat(), "the owner's link is undisturbed"


def test_attach_by_endpoint(foreign, manager):
    n, sim, owner = foreign
    h = manager.start("e", endpoint=f"tcp:127.0.0.1:{ports(n).serial2}")
    assert h.ready and h.pid == sim.pid and h.instance == n and h.on_localhost
    assert h.endpoint("serial1") == f"tcp:127.0.0.1:{ports(n).serial1}"
    with pytest.raises(ValueError, match="not tcp:HOST:PORT"):
        manager.start("bad", endpoint="serial:/dev/ttyUSB0")


def test_warnings_throttled_then_ready(procs, tmp_path, instances, manager, caplog, monkeypatch):
    monkeypatch.setattr(um, "WARN_EVERY_S", 0.5)
    n = instances[1]
    h = UnmanagedSitl(manager, "late", instance=n)
    h.spawn()
    result = []
    t = threading.Thread(target=lambda: result.append(h.wait_running(30)))
    with caplog.at_level(logging.WARNING, logger="sitlpool.unmanaged"):
        t.start()
        time.sleep(1.7)
        start_sim(procs, tmp_path / "late", n, "--serial0", "tcp:0", "--speedup", 5)
        t.join(30)
    assert result == [True]
    warnings = [r.getMessage() for r in caplog.records if "waiting for unmanaged SITL" in r.getMessage()]
    assert len(warnings) >= 2, warnings
    times = [r.created for r in caplog.records if "waiting for unmanaged SITL" in r.getMessage()]
    assert all(b - a >= 0.45 for a, b in zip(times, times[1:])), f"not throttled: {times}"
    assert f"instance {n}" in warnings[0] and "nothing listens" in warnings[0]
    h.kill()


def test_death_seen_and_reported(foreign, manager):
    n, sim, owner = foreign
    h = manager.start("w", instance=n)
    os.kill(sim.pid, signal.SIGKILL)
    assert h.join(5)
    st = h.status
    assert not st.success and f"process {sim.pid}" in st.reason and "exited" in st.reason
    got = manager.wait_termination(1)
    assert got == {h: st}
    assert manager.wait_termination(0) == {}


def test_death_by_heartbeat_for_an_endpoint_only(foreign, env):
    n, sim, owner = foreign
    m = UnmanagedManager()
    h = m.start("remote-ish", endpoint=f"tcp:127.0.0.1:{ports(n).serial1}", host_id="far-away", lost_after=1.0)
    assert not h.on_localhost
    os.kill(sim.pid, signal.SIGSTOP)  # hangs: no exit, no HEARTBEAT
    try:
        assert h.join(10)
        assert "no HEARTBEAT" in h.status.reason and not h.status.success
    finally:
        os.kill(sim.pid, signal.SIGCONT)


def test_kill_only_detaches(foreign, manager):
    n, sim, owner = foreign
    h = manager.start("k", instance=n)
    h.kill(wait=True)
    assert h.dead and h.status.success and "detached" in h.status.reason
    time.sleep(0.3)
    assert sim.poll() is None, "the SITL keeps running"
    assert owner.heartbeat() and owner.recv("HEARTBEAT", 3), "its owner stays connected"
    h2 = manager.start("k2", instance=n)  # serial1 is free again after the detach
    assert h2.link.endpoint.endswith(str(ports(n).serial1))


def test_read_only_unless_control(foreign, manager):
    n, sim, owner = foreign
    ro = manager.start("ro", instance=n)
    for call in (
        ro.link.arm,
        lambda: ro.link.set_mode("GUIDED"),
        lambda: ro.link.set_param("RTL_ALT", 2000),
        lambda: ro.link.takeoff(5),
        lambda: ro.link.goto(0, 0, 5),
    ):
        with pytest.raises(ReadOnlyLink, match="read-only"):
            call()
    assert ro.link.get_param("RTL_ALT") == 1500  # reading is fine
    rw = manager.start("rw", instance=n, control=True)
    assert rw.link.set_param("RTL_ALT", 2000) == 2000


def test_monitor_exception_surfaces(foreign, manager):
    n, sim, owner = foreign
    h = UnmanagedSitl(manager, "boom", instance=n)
    manager._add(h)

    def broken(period):
        raise RuntimeError("injected failure")

    h._monitor = broken
    h.spawn()
    assert h.wait_running(10)
    assert h.join(5)
    with pytest.raises(RuntimeError, match="injected failure"):
        h.verify_threads_state()
    got = manager.wait_termination(1)
    assert not got[h].success and "injected failure" in got[h].reason
    assert sim.poll() is None


def test_one_manager_reports_both_kinds(foreign, env):
    n, sim, owner = foreign
    m = SitlManager()
    try:
        managed = m.start("mine", speedup=5)
        seen = m.attach("theirs", instance=n)
        os.kill(managed.pid, signal.SIGKILL)
        os.kill(sim.pid, signal.SIGKILL)
        got = {}
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got.update(m.wait_termination(1))
        assert set(got) == {managed, seen}
        assert all(not s.success for s in got.values())
    finally:
        m.close_all()


def test_discover_lists_unleased_sitls_including_instance_0(procs, tmp_path, foreign, env):
    n, sim, owner = foreign
    if listening(5760):
        pytest.skip("something already listens on instance 0's port 5760 on this machine")
    zero = start_sim(procs, tmp_path / "zero", 0, "--serial0", "tcp:0")
    wait_for(lambda: listening(5762))
    found = {d.instance: d for d in discover()}
    assert 0 in found and found[0].pid == zero.pid
    d = found[n]
    assert d.pid == sim.pid and "sitlpool.sim" in " ".join(d.cmdline)
    assert d.clients["serial0"] and f"pid {os.getpid()}" in d.clients["serial0"][0]
    assert d.free_to_attach == "serial1"
    m = ManagedSitl(None, "leased", speedup=5)
    m.spawn()
    try:
        assert m.wait_running(10)
        assert m.instance not in {d.instance for d in discover()}, "a leased SITL is not 'without a lease'"
    finally:
        m.kill(wait=True)


def test_attach_udp_endpoint(env):
    """udp:HOST:PORT listens (pymavlink's udpin): a vehicle sending there is attached, heartbeat-watched."""
    import socket as _s

    from pymavlink.dialects.v20 import ardupilotmega as mavlink

    probe = _s.socket(_s.AF_INET, _s.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    vehicle = _s.socket(_s.AF_INET, _s.SOCK_DGRAM)
    vehicle.bind(("127.0.0.1", 0))
    vehicle.settimeout(0.05)
    mav = mavlink.MAVLink(None, 1, 1)
    stop = threading.Event()
    heard = []

    def fly():
        parser = mavlink.MAVLink(None)
        while not stop.is_set():
            hb = mavlink.MAVLink_heartbeat_message(2, 3, 209, 4, 4, 3).pack(mav)
            vehicle.sendto(hb, ("127.0.0.1", port))
            try:
                data = vehicle.recv(4096)
                heard.extend(m.get_type() for m in parser.parse_buffer(data) or [])
            except OSError:
                pass
            time.sleep(0.1)

    t = threading.Thread(target=fly, daemon=True)
    t.start()
    m = UnmanagedManager()
    try:
        h = m.start("udp", endpoint=f"udp:127.0.0.1:{port}", lost_after=1.0)
        assert h.ready and h.link.vehicle.mode == "GUIDED" and h.link.vehicle.armed
        wait_for(lambda: "HEARTBEAT" in heard, what="our GCS heartbeat to reach the vehicle")
        stop.set()
        t.join()
        assert h.join(10) and "no HEARTBEAT" in h.status.reason
    finally:
        stop.set()
        vehicle.close()
        m.close_all()
