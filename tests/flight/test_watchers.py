"""Ground stations (pymavlink here, MAVProxy in tests/gcs) watching a vehicle through the
session's own link (``sitlpool.mavlink.forward``, ``sitlpool watch``): they see the flight
live, a read-only watcher's commands are refused and it is told why, parameters and missions
are answered, and the agent flying the vehicle never notices (its flight, its parameter and
mission exchanges), whatever the watchers do (flood, vanish, stop reading)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque

import pytest

from conftest import hold_lease, start_sim, wait_for
from sitlpool.errors import ConfigError, MavlinkError
from sitlpool.instances import ports
from sitlpool.mavlink import forward, mission, params
from sitlpool.mavlink.forward import Forwarder, parse_output
from sitlpool.mavlink.link import A, VehicleLink
from sitlpool.mavlink.recorder import recorder_for
from sitlpool.mavlink.watch_answers import TEXT_EVERY_S
from sitlpool.sessions import Sessions

ALT_HOLD, GUIDED, LAND = 2, 4, 9  # ArduCopter custom modes


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watcher:
    """A pymavlink ground station: everything it receives is kept (with its arrival time)."""

    def __init__(self, url: str):
        from pymavlink import mavutil

        self.m = mavutil.mavlink_connection(url, source_system=255, source_component=230, autoreconnect=False)
        self.msgs: deque = deque(maxlen=200_000)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        while not self._stop.is_set():
            try:
                m = self.m.recv_match(blocking=True, timeout=0.2)
            except OSError:
                return
            if m is not None and m.get_type() != "BAD_DATA":
                self.msgs.append((time.monotonic(), m))

    def seen(self, type, cond=None, since=0.0) -> list:
        return [m for t, m in list(self.msgs) if t >= since and m.get_type() == type and (cond is None or cond(m))]

    def wait(self, type, cond=None, timeout=10.0, since=0.0):
        return wait_for(lambda: (self.seen(type, cond, since) or [None])[-1], timeout, what=f"a {type}")

    def close(self):
        self._stop.set()
        self._t.join(2)
        self.m.close()


@pytest.fixture
def session(env, vehicle_binary, monkeypatch):
    if vehicle_binary is not None:
        monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(vehicle_binary))
    sessions = Sessions()
    sessions.start()
    s = sessions.open(speedup=5)
    yield s
    sessions.close_all()


@pytest.fixture
def watchers():
    made: list = []

    def make(url):
        w = Watcher(url)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def forwarder(link, outputs, **kw) -> Forwarder:
    fw = Forwarder(link, outputs, **kw)
    FORWARDERS.append(fw)
    return fw


FORWARDERS: list[Forwarder] = []


@pytest.fixture(autouse=True)
def _close_forwarders():
    yield
    while FORWARDERS:
        FORWARDERS.pop().close()


def read_params(w: Watcher, total_timeout: float = 60) -> dict:
    """A ground station's parameter download: the list, then the missing ones by index."""
    t0 = time.monotonic()
    w.m.mav.param_request_list_send(1, 1)
    deadline = t0 + total_timeout
    while time.monotonic() < deadline:
        got = {m.param_index: m for m in w.seen("PARAM_VALUE", since=t0) if m.param_index != 65535}
        count = max((m.param_count for m in got.values()), default=None)
        if count is not None and len(got) >= count:
            return {m.param_id: m.param_value for m in got.values()}
        time.sleep(1.0)
        if count is not None:
            for i in [i for i in range(count) if i not in got][:50]:
                w.m.mav.param_request_read_send(1, 1, b"", i)
    raise AssertionError("the watcher's parameter list never completed")


def download_mission(w: Watcher, timeout: float = 20) -> list:
    t0 = time.monotonic()
    w.m.mav.mission_request_list_send(1, 1, 0)
    count = w.wait("MISSION_COUNT", timeout=timeout, since=t0).count
    items = []
    for seq in range(count):
        t1 = time.monotonic()
        w.m.mav.mission_request_int_send(1, 1, seq, 0)
        items.append(w.wait("MISSION_ITEM_INT", lambda m, s=seq: m.seq == s, timeout=5, since=t1))
    w.m.mav.mission_ack_send(1, 1, 0, 0)
    return items


# ---- a hop, watched --------------------------------------------------------------------


def test_watchers_see_a_hop_live_cannot_change_it_and_the_agent_never_notices(session, watchers):
    link, flight = session.link, session.flight
    p1, p2 = free_udp_port(), free_udp_port()
    fw = forwarder(link, [f"udp:127.0.0.1:{p1}", f"udp:127.0.0.1:{p2}", "tcpin:127.0.0.1:0"])
    host, port = fw.address[0]
    w1, w2, w3 = watchers(f"udpin:127.0.0.1:{p1}"), watchers(f"udpin:127.0.0.1:{p2}"), watchers(f"tcp:{host}:{port}")
    for w in (w1, w2, w3):
        assert w.wait("HEARTBEAT", lambda m: m.get_srcSystem() == 1 and m.type != A.MAV_TYPE_GCS).autopilot == 3
    w1.m.mav.heartbeat_send(A.MAV_TYPE_GCS, A.MAV_AUTOPILOT_INVALID, 0, 0, 0)  # a udp watcher speaks first

    stop = threading.Event()

    def pester():  # w1 tries to land the vehicle, every way a ground station would
        while not stop.is_set():
            w1.m.mav.command_long_send(1, 1, A.MAV_CMD_DO_SET_MODE, 0, 1, LAND, 0, 0, 0, 0, 0)
            w1.m.mav.set_mode_send(1, 1, LAND)
            w1.m.mav.command_long_send(1, 1, A.MAV_CMD_NAV_LAND, 0, 0, 0, 0, 0, 0, 0, 0)
            stop.wait(0.3)

    pest = threading.Thread(target=pester, daemon=True)
    pest.start()
    w2_params: dict = {}
    lister = threading.Thread(target=lambda: w2_params.update(read_params(w2)), daemon=True)
    try:
        t0 = time.monotonic()
        lister.start()  # w2 downloads every parameter while the agent sets and reads its own
        assert link.set_param("RTL_ALT", 1600) == 1600
        assert link.get_param("RTL_ALT") == 1600
        agent_list = params.get_all(link, prefix="RTL_")
        assert agent_list["params"]["RTL_ALT"] == 1600 and agent_list["total"] > 100
        flight.arm_and_takeoff(5)
        wait_for(lambda: (link.vehicle.rel_alt or 0) >= flight.reached(5), 60, what="the agent's takeoff")
        t_land = time.monotonic()
        flight.land()
        wait_for(lambda: not link.vehicle.armed, 120, what="the agent's landing")
    finally:
        stop.set()
        pest.join(5)
    lister.join(90)
    modes = [e[2] for e in recorder_for(link).events_between(t0, t_land) if e[1] == "mode"]
    assert "LAND" not in modes, f"a read-only watcher changed the mode: {modes}"
    for w in (w1, w2, w3):  # the hop, live: armed in GUIDED, climbing to 5 m, landing, disarmed
        assert w.seen("HEARTBEAT", lambda m: m.custom_mode == GUIDED and m.base_mode & 128 and m.get_srcSystem() == 1)
        assert max(m.relative_alt for m in w.seen("GLOBAL_POSITION_INT")) >= 4000
        assert w.seen("HEARTBEAT", lambda m: m.custom_mode == LAND and m.get_srcSystem() == 1, since=t_land)
    texts = [m.text for m in w1.seen("STATUSTEXT")]
    assert any("read-only watch" in t for t in texts), texts[-10:]
    assert w1.seen("COMMAND_ACK", lambda m: m.command == A.MAV_CMD_DO_SET_MODE and m.result == A.MAV_RESULT_DENIED)
    assert not w2.seen("STATUSTEXT", lambda m: "read-only" in m.text), "only the watcher that tried is told"
    assert w2_params["RTL_ALT"] == 1600 and len(w2_params) == agent_list["total"]
    assert fw.info()["refused"] > 0 and fw.info()["dropped"] == 0
    # sent from the link's thread at the end of each read (no hop through the forwarder's thread)
    assert fw._read_sends > 100 and fw.forwarded > 5 * fw._read_sends, (fw._read_sends, fw.forwarded)


def test_a_watcher_reads_the_mission_while_the_agent_uploads_again_and_again(session, watchers):
    link = session.link
    wait_for(lambda: link.vehicle.home is not None or link.vehicle.lat, 30, what="a position")
    lat, lon = (link.vehicle.home or (link.vehicle.lat, link.vehicle.lon))[:2]

    def plan(n):
        return [{"command": "takeoff", "alt_m": 10}] + [
            {"command": "waypoint", "lat": lat + 0.0001 * i, "lon": lon, "alt_m": 10 + n} for i in range(1, 4)
        ]

    mission.upload(link, plan(0))
    p = free_udp_port()
    forwarder(link, [f"udp:127.0.0.1:{p}"])
    w = watchers(f"udpin:127.0.0.1:{p}")
    w.wait("HEARTBEAT")
    w.m.mav.heartbeat_send(A.MAV_TYPE_GCS, A.MAV_AUTOPILOT_INVALID, 0, 0, 0)
    items = download_mission(w)
    assert len(items) == 5 and [i.command for i in items[1:]] == [22, 16, 16, 16]
    assert items[2].x == round((lat + 0.0001) * 1e7) and items[2].z == 10
    assert items[2].target_component == 230, "answered to the watcher, not to the link"

    errors: list = []
    uploads = []

    def agent():
        for n in range(1, 6):
            try:
                mission.upload(link, plan(n))
                uploads.append(n)
            except Exception as e:  # the test fails on any
                errors.append(e)

    a = threading.Thread(target=agent)
    a.start()
    while a.is_alive():
        got = download_mission(w)
        assert len(got) == 5 and got[2].z in range(10, 16)  # one whole mission, never half of two
    a.join()
    assert not errors and uploads == [1, 2, 3, 4, 5]
    t = time.monotonic()
    w.m.mav.mission_clear_all_send(1, 1, 0)
    assert w.wait("MISSION_ACK", since=t).type == A.MAV_MISSION_DENIED
    assert mission.download(link)["count"] == 4, "the read-only watcher's clear changed nothing"
    assert download_mission(w)[2].z == 15


def test_the_agents_parameter_set_is_never_fooled_by_a_list_in_flight(session):
    """Watchers' parameter lists stream every value through the agent's link: a PARAM_VALUE of
    the old value may arrive after the agent's PARAM_SET; the set waits for its own answer (it
    failed with 'the vehicle kept 1500 instead of 1600' before)."""
    link = session.link
    for n in range(1, 6):
        link.send(A.MAVLink_param_request_list_message(1, 1))  # what the forwarder sends for a watcher
        assert link.set_param("RTL_ALT", 1500 + 100 * n) == 1500 + 100 * n
    t0 = time.monotonic()
    with pytest.raises(MavlinkError, match=r"RTL_ALT: the vehicle kept 1700 instead of 1700.4"):
        link.set_param("RTL_ALT", 1700.4)  # an integer parameter: what the vehicle kept is still said
    assert time.monotonic() - t0 < 2.5, "said after a short settle, not the whole timeout"


# ---- bad watchers ---------------------------------------------------------------------------


def test_floods_vanished_and_stalled_watchers_never_disturb_the_link(session, watchers, monkeypatch):
    link = session.link
    monkeypatch.setattr(forward, "TCP_BUFFER", 8192)
    gone, flood, good = free_udp_port(), free_udp_port(), free_udp_port()  # nobody ever listens on `gone`
    fw = forwarder(
        link, [f"udp:127.0.0.1:{gone}", f"udp:127.0.0.1:{flood}", f"udp:127.0.0.1:{good}", "tcpin:127.0.0.1:0"]
    )
    w = watchers(f"udpin:127.0.0.1:{good}")
    w.wait("HEARTBEAT")
    host, port = fw.address[0]
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((host, port))  # never reads
    closer = socket.create_connection((host, port))
    closer.close()  # connects and vanishes

    flooder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flooder.bind(("127.0.0.1", flood))
    mav = A.MAVLink(None, 255, 230)
    junk = bytes(mav.command_long_encode(1, 1, A.MAV_CMD_DO_SET_MODE, 0, 1, LAND, 0, 0, 0, 0, 0).pack(mav)) * 40
    stop = threading.Event()
    sent = [0]

    def flooding():
        while not stop.is_set():
            try:
                flooder.sendto(junk + os.urandom(200), ("127.0.0.1", fw.watchers[1].sock.getsockname()[1]))
                sent[0] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=flooding, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    worst_hb, worst_param = 0.0, 0.0
    try:
        end = time.monotonic() + 6
        while time.monotonic() < end:
            t = time.monotonic()
            assert link.get_param("RTL_ALT") == 1500
            worst_param = max(worst_param, time.monotonic() - t)
            worst_hb = max(worst_hb, link.vehicle.heartbeat_age() or 0)
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        flooder.close()
    assert sent[0] > 1000, "the flood flowed"
    assert link.state == "connected" and link.vehicle.mode != "LAND"
    assert worst_hb < 2.0 and worst_param < 1.0, (worst_hb, worst_param)
    wait_for(lambda: not any(x.tcp for x in fw.watchers), 30, what="the stalled TCP watcher to be dropped")
    stalled.close()
    t = time.monotonic()
    w.wait("HEARTBEAT", since=t, timeout=3)  # the good watcher is still served
    assert fw._thread.is_alive() and fw._worker.is_alive()


def test_control_lets_commands_through_only_on_a_writable_link(session, watchers):
    link = session.link
    p = free_udp_port()
    forwarder(link, [f"udp:127.0.0.1:{p}"], control=True)
    w = watchers(f"udpin:127.0.0.1:{p}")
    w.wait("HEARTBEAT")
    wait_for(lambda: not link.vehicle.booting, 30, what="the vehicle to boot")
    t = time.monotonic()
    w.m.mav.command_long_send(1, 1, A.MAV_CMD_DO_SET_MODE, 0, 1, ALT_HOLD, 0, 0, 0, 0, 0)
    ack = w.wait("COMMAND_ACK", lambda m: m.command == A.MAV_CMD_DO_SET_MODE, since=t)
    assert ack.result == 0, (ack, link.vehicle.texts)
    wait_for(lambda: link.vehicle.mode == "ALT_HOLD", 10, what="the watcher's mode change")
    ro = VehicleLink("tcp:127.0.0.1:1", read_only=True)  # never started: refused before anything
    with pytest.raises(ConfigError, match="attached read-only: a watcher cannot control it"):
        Forwarder(ro, [f"udp:127.0.0.1:{p}"], control=True)


def test_outputs_are_loopback_unless_allowed():
    assert parse_output("udp:127.0.0.1:14550") == ("udp", "127.0.0.1", 14550)
    assert parse_output("udpout:localhost:14550")[0] == "udp"
    assert parse_output("tcpin:[::1]:5000") == ("tcpin", "::1", 5000)
    assert parse_output("udp:192.0.2.7:14550", allow_remote=True)[1] == "192.0.2.7"
    for bad, match in [
        ("udp:192.0.2.7:14550", "192.0.2.7 is not this machine's loopback.*--allow-remote"),
        ("udp:0.0.0.0:14550", "not this machine's loopback"),
        ("tcp:127.0.0.1:5760", "use udp:HOST:PORT .* or tcpin:HOST:PORT"),
        ("udp:127.0.0.1:99999", "is not udp:HOST:PORT"),
        ("udp:127.0.0.1", "is not udp:HOST:PORT"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            parse_output(bad)
        assert "\n" not in str(e.value)


# ---- sitlpool watch -------------------------------------------------------------------------

DRIVER = """
import sys
from sitlpool.cli import main, parser
if "watch" in parser()._subparsers._group_actions[0].choices:
    sys.exit(main(sys.argv[1:]))
from sitlpool.cli import _common, watch  # not registered yet: the command alone
p = _common.Parser(prog="sitlpool")
watch.add_parser(p.add_subparsers(dest="command", required=True))
a = p.parse_args(sys.argv[1:])
try:
    sys.exit(a.fn(a))
except KeyboardInterrupt:
    sys.exit(130)
except Exception as e:
    _common.err(str(e))
    sys.exit(1)
"""


def watch_cmd(procs, *args, **kw):
    return procs.python(DRIVER, "watch", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_sitlpool_watch_forwards_read_only_and_follows_the_rules_of_attach(
    env, procs, instances, tmp_path, watchers, lock_dir
):
    n = instances[0]
    start_sim(procs, tmp_path / "v", n, "--speedup", 5)
    agent = VehicleLink(f"tcp:127.0.0.1:{ports(n).serial0}", connect_timeout=10).start()  # the agent's link
    try:
        assert agent.wait_heartbeat(10)
        p = free_udp_port()
        bad = watch_cmd(procs, n, "--out", "udp:192.0.2.7:14550")
        assert bad.wait(30) == 1 and "not this machine's loopback" in bad.stderr.read()
        cli = watch_cmd(procs, n, "--out", f"udp:127.0.0.1:{p}", env=env)
        w = watchers(f"udpin:127.0.0.1:{p}")
        assert w.wait("HEARTBEAT", lambda m: m.get_srcSystem() == 1, timeout=30)
        assert "read-only" in cli.stdout.readline()
        w.m.mav.command_long_send(1, 1, A.MAV_CMD_DO_SET_MODE, 0, 1, GUIDED, 0, 0, 0, 0, 0)
        said = w.wait("STATUSTEXT", lambda m: "read-only watch" in m.text)
        assert said.text == "sitlpool: read-only watch, DO_SET_MODE dropped" and said.id == 0, said
        # a refusal longer than STATUSTEXT's 50 bytes comes whole, as MAVLink 2 chunks sharing an id
        time.sleep(TEXT_EVERY_S)  # one refusal text per watcher every TEXT_EVERY_S
        w.m.mav.command_long_send(1, 1, A.MAV_CMD_PREFLIGHT_REBOOT_SHUTDOWN, 0, 1, 0, 0, 0, 0, 0, 0)
        first = w.wait("STATUSTEXT", lambda m: m.id != 0 and m.chunk_seq == 0, timeout=15)
        rest = w.wait("STATUSTEXT", lambda m: m.id == first.id and m.chunk_seq == 1)
        assert first.text + rest.text == "sitlpool: read-only watch, PREFLIGHT_REBOOT_SHUTDOWN dropped"
        time.sleep(0.5)
        assert agent.vehicle.mode == "STABILIZE"
        assert agent.get_param("RTL_ALT") == 1500 and agent.connected  # the agent's link is untouched
        os.kill(cli.pid, signal.SIGINT)
        assert cli.wait(15) == 0
        holder = hold_lease(procs, lock_dir, n, "someone-else-flies")
        ctl = watch_cmd(procs, n, "--out", f"udp:127.0.0.1:{p}", "--control", env=env)
        assert ctl.wait(30) == 1
        assert "leased to someone-else-flies" in ctl.stderr.read()
        holder.kill()
    finally:
        agent.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
