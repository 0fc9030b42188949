"""The built-in vehicle, as a GCS and as a process manager see it."""

import math
import os
import signal
import socket
import subprocess
import sys
import time

from conftest import Gcs, listening, start_sim, wait_for
from sitlpool.instances import ports
from sitlpool.ports import read_sockets
from sitlpool.sim.copter import MODES

ACCEPTED, FAILED = 0, 4


def sim_run(args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool.sim", *args], cwd=cwd, capture_output=True, text=True, timeout=30
    )


def test_flags(tmp_path):
    r = sim_run(["-I", "1"], tmp_path)
    assert r.returncode == 1 and "You must specify a vehicle model." in r.stdout
    r = sim_run(["-I", "1", "--model", "quad", "--no-such-flag"], tmp_path)
    assert r.returncode == 1 and "--no-such-flag" in r.stderr
    r = sim_run(["-I", "1", "--model", "glider"], tmp_path)
    assert r.returncode == 1 and "Unknown vehicle model 'glider'" in r.stderr
    r = sim_run(["--help"], tmp_path)
    assert "--speedup" in r.stdout and "--defaults" in r.stdout


def test_port_timeline_and_log_lines(procs, tmp_path, instances):
    n = instances[0]
    p = ports(n)
    sim = start_sim(procs, tmp_path, n)
    wait_for(lambda: listening(p.serial0), what="SERIAL0")
    wait_for(lambda: b"Waiting for connection ...." in (tmp_path / "stdout").read_bytes(), what="waiting line")
    time.sleep(0.3)
    socks = read_sockets()
    mine = {(s.proto, s.local_port) for s in socks}
    assert ("tcp", p.serial0) in mine
    assert [x.local_addr for x in socks if x.local_port == p.serial0] == ["0.0.0.0"], "SITL binds every address"
    assert not {("tcp", p.serial1), ("tcp", p.serial2), ("udp", p.rc_in)} & mine, "only SERIAL0 before a client"
    assert (tmp_path / "eeprom.bin").exists()
    g = Gcs(p.serial0)
    assert g.heartbeat().type == 2  # MAV_TYPE_QUADROTOR
    wait_for(lambda: listening(p.serial1) and listening(p.serial2), what="SERIAL1/2 after the first client")
    assert any(s.proto == "udp" and s.local_port == p.rc_in for s in read_sockets())
    err = (tmp_path / "stderr").read_text()
    for k, port in enumerate(p.tcp):
        assert f"bind port {port} for SERIAL{k}" in err and f"SERIAL{k} on TCP port {port}" in err
    assert (tmp_path / "logs").is_dir()
    g.close()
    time.sleep(0.3)
    assert sim.poll() is None, "a client leaving does not stop the vehicle"


def test_bind_collision_exits_1(procs, tmp_path, instances):
    p = ports(instances[0])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a previous test's TIME_WAIT must not matter
    s.bind(("0.0.0.0", p.serial0))
    s.listen()
    try:
        sim = start_sim(procs, tmp_path, instances[0])
        assert sim.wait(20) == 1
        assert f"bind failed on port {p.serial0} - Address already in use" in (tmp_path / "stderr").read_text()
    finally:
        s.close()


def test_one_client_per_port(procs, tmp_path, instances):
    p = ports(instances[0])
    start_sim(procs, tmp_path, instances[0], "--speedup", 5)
    first = Gcs(p.serial0)
    first.heartbeat()
    a = Gcs(p.serial1)
    a.heartbeat()
    b = Gcs(p.serial1)  # the kernel accepts it; the vehicle does not serve it
    assert b.m.recv_match(type="HEARTBEAT", blocking=True, timeout=1.5) is None
    a.close()
    assert b.heartbeat(timeout=5)  # served once the first client left
    b.close()
    first.close()


def test_sigterm_before_and_after_boot(procs, tmp_path, instances):
    early = start_sim(procs, tmp_path / "a", instances[0])
    wait_for(lambda: listening(ports(instances[0]).serial0))
    early.send_signal(signal.SIGTERM)
    assert early.wait(10) == -signal.SIGTERM  # killed outright while waiting for a client
    sim = start_sim(procs, tmp_path / "b", instances[1])
    g = Gcs(ports(instances[1]).serial0)
    g.heartbeat()
    sim.send_signal(signal.SIGTERM)
    assert sim.wait(10) == 0
    assert "Exitting" in (tmp_path / "b" / "stdout").read_text()
    g.close()


PARENT = """
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-m", "sitlpool.sim", "-I", sys.argv[1], "--model", "quad", "--speedup", "5"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(p.pid, flush=True)
time.sleep(3600)
"""


def test_exits_when_its_parent_dies(procs, tmp_path, instances):
    p = ports(instances[0])
    parent = procs.python(PARENT, instances[0], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    sim_pid = int(parent.stdout.readline())
    g = Gcs(p.serial0)
    g.heartbeat()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_for(
        lambda: not os.path.exists(f"/proc/{sim_pid}") or open(f"/proc/{sim_pid}/stat").read().split()[2] == "Z",
        what="the vehicle to exit after its parent died",
    )
    g.close()


def test_reboot_keeps_pid_and_waits_again(procs, tmp_path, instances):
    p = ports(instances[0])
    sim = start_sim(procs, tmp_path, instances[0], "--speedup", 5)
    g = Gcs(p.serial0)
    g.heartbeat()
    assert g.command(246, 1) == ACCEPTED  # PREFLIGHT_REBOOT_SHUTDOWN
    g.close()
    wait_for(lambda: (tmp_path / "stdout").read_text().count("Waiting for connection") == 2, what="reboot")
    assert sim.poll() is None
    g = Gcs(p.serial0)
    g.heartbeat()
    assert sim.pid == int(open(f"/proc/{sim.pid}/stat").read().split()[0])
    assert open(f"/proc/{sim.pid}/comm").read().strip() == "sitlpool-sim"
    g.close()


def _param(g, name, timeout=5):
    g.m.mav.param_request_read_send(1, 1, name.encode(), -1)
    m = g.recv("PARAM_VALUE", timeout, lambda m: m.param_id == name)
    return None if m is None else m.param_value


def test_params_persist_unless_wiped(procs, tmp_path, instances):
    p = ports(instances[0])
    parm = tmp_path / "my.parm"
    parm.write_text("# a comment\nRTL_ALT 2500\nWPNAV_RADIUS,300\nMY_EXTRA 7\n")
    sim = start_sim(procs, tmp_path, instances[0], "--defaults", parm, "--speedup", 5)
    g = Gcs(p.serial0)
    g.heartbeat()
    assert _param(g, "RTL_ALT") == 2500 and _param(g, "WPNAV_RADIUS") == 300
    assert _param(g, "MY_EXTRA", 1) is None, "as ArduPilot, names it does not have are ignored"
    g.m.mav.param_set_send(1, 1, b"WPNAV_SPEED", 777, 9)
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "WPNAV_SPEED").param_value == 777
    g.m.mav.param_request_list_send(1, 1)
    first = g.recv("PARAM_VALUE", 5)
    assert first.param_count == 1354  # ArduCopter 4.7's parameter set (with copter.parm)
    g.close()
    sim.terminate()
    sim.wait(10)
    sim = start_sim(procs, tmp_path, instances[0], "--speedup", 5)
    g = Gcs(p.serial0)
    g.heartbeat()
    assert _param(g, "WPNAV_SPEED") == 777, "kept in eeprom.bin"
    g.close()
    sim.terminate()
    sim.wait(10)
    start_sim(procs, tmp_path, instances[0], "-w", "--speedup", 5)
    g = Gcs(p.serial0)
    g.heartbeat()
    assert _param(g, "WPNAV_SPEED") == 1000, "-w wipes"
    g.close()


def _pos(g):
    return g.recv("GLOBAL_POSITION_INT", 5)


def test_full_flight(procs, tmp_path, instances):
    p = ports(instances[0])
    start_sim(procs, tmp_path, instances[0], "--speedup", 10, "--ready-delay", 8)
    g = Gcs(p.serial0)
    hb = g.heartbeat()
    assert hb.autopilot == 3 and hb.custom_mode == MODES["STABILIZE"]
    g.m.mav.request_data_stream_send(1, 1, 0, 4, 1)
    # refused before GPS/EKF are ready, with the reason
    assert g.command(400, 1) == FAILED
    said = any(t.startswith("Arm: ") for t in g.seen_texts)  # (the text follows the ACK)
    assert said or g.recv("STATUSTEXT", 5, lambda m: m.text.startswith("Arm: ")), g.seen_texts
    wait_for(lambda: g.recv("GPS_RAW_INT", 2).fix_type >= 3, timeout=10, what="GPS fix")
    # GUIDED is accepted disarmed at once; arming in it waits for the EKF to use GPS
    g.m.set_mode(MODES["GUIDED"])
    assert g.recv("COMMAND_ACK", 5, lambda a: a.command == 176).result == ACCEPTED
    assert g.command(22, 0, 0, 0, 0, 0, 0, 10) == FAILED  # takeoff while disarmed
    wait_for(
        lambda: "EKF3 IMU0 is using GPS" in g.seen_texts or g.recv("STATUSTEXT", 1) and False,
        timeout=10,
        what="EKF using GPS",
    )
    assert g.command(400, 1) == ACCEPTED
    assert g.recv("HEARTBEAT", 5, lambda h: h.base_mode & 128 and h.system_status == 4)
    assert g.command(22, 0, 0, 0, 0, 0, 0, 10) == ACCEPTED
    wait_for(lambda: _pos(g).relative_alt > 9500, timeout=20, what="10 m")
    assert g.command(400, 0) == FAILED  # no disarm in the air without force
    here = _pos(g)
    lat, lon = here.lat / 1e7 + 50 / 111320, here.lon / 1e7
    g.m.mav.set_position_target_global_int_send(
        0, 1, 1, 6, 0xFF8, int(lat * 1e7), int(lon * 1e7), 10, 0, 0, 0, 0, 0, 0, 0, 0
    )

    def dist():
        m = _pos(g)
        return math.hypot((m.lat / 1e7 - lat) * 111320, (m.lon / 1e7 - lon) * 111320 * math.cos(math.radians(lat)))

    wait_for(lambda: dist() < 2, timeout=30, what="go-to 50 m away")
    assert g.command(20) == ACCEPTED  # RTL
    wait_for(lambda: not (g.recv("HEARTBEAT", 5).base_mode & 128), timeout=60, what="landed and disarmed")
    m = _pos(g)
    assert m.relative_alt < 300
    assert math.hypot(m.lat / 1e7 - here.lat / 1e7, m.lon / 1e7 - here.lon / 1e7) * 111320 < 3, "back home"
    g.m.mav.ping_send(int(time.time() * 1e6), 7, 0, 0)
    assert g.recv("PING", 5, lambda m: m.seq == 7)
    for name in ("SYS_STATUS", "VFR_HUD", "ATTITUDE", "BATTERY_STATUS", "SYSTEM_TIME", "SIMSTATE"):
        assert g.recv(name, 12) is not None, name
    batt = g.recv("BATTERY_STATUS", 12)
    assert 0 < batt.battery_remaining < 100 and batt.current_consumed > 0, "the flight drained the battery"
    g.close()


def test_more_mavlink(procs, tmp_path, instances):
    """sysid/base-port flags, SET_MESSAGE_INTERVAL, guided MISSION_ITEM_INT, RC override climb, TIMESYNC, PreArm repeats."""
    base = 5760 + 10 * instances[1]  # instance 0's layout moved to another base port
    start_sim(
        procs,
        tmp_path,
        0,
        "--base-port",
        base,
        "--sysid",
        7,
        "--speedup",
        10,
        "--ready-delay",
        400,
        "--rc-in-port",
        ports(instances[1]).rc_in,
        "--model",
        "hexa",
    )
    g = Gcs(base)
    g.heartbeat()
    assert g.m.target_system == 7
    g.m.mav.heartbeat_send(6, 8, 0, 0, 0)  # a GCS that has spoken gets STATUSTEXTs (as on ArduPilot)
    # PreArm repeats every 30 s of sim time while not armable (3 s at speedup 10)
    assert g.recv("STATUSTEXT", 10, lambda m: m.text.startswith("PreArm: ")) is not None
    assert g.command(511, 33, 50000) == ACCEPTED  # GLOBAL_POSITION_INT at 20 Hz (sim time)
    g.recv("GLOBAL_POSITION_INT", 2)
    stamps = [g.recv("GLOBAL_POSITION_INT", 2).time_boot_ms for _ in range(20)]
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    assert gaps[len(gaps) // 2] <= 60, gaps  # 50 ms apart in sim time (the default is 250 ms)
    assert g.command(511, 33, -1) == ACCEPTED  # disabled
    g.recv("HEARTBEAT", 3)
    assert g.recv("GLOBAL_POSITION_INT", 1.5) is None
    g.m.mav.timesync_send(0, 12345)  # (tc1=0: a request)
    assert g.recv("TIMESYNC", 5, lambda m: m.ts1 == 12345 and m.tc1 != 0)
    g.close()


def ready_vehicle(procs, tmp_path, n):
    """A vehicle at speedup 10 with GPS/EKF ready, and a GCS connected to it."""
    start_sim(procs, tmp_path, n, "--speedup", 10, "--ready-delay", 1)
    g = Gcs(ports(n).serial0)
    g.heartbeat()
    g.m.mav.request_data_stream_send(1, 1, 0, 4, 1)  # ArduPilot streams only what is asked for
    wait_for(lambda: g.recv("EKF_STATUS_REPORT", 2, lambda m: m.flags & 0x10), what="EKF using GPS")
    return g


def set_mode(g, name):
    g.m.set_mode(MODES[name])
    return g.recv("COMMAND_ACK", 5, lambda a: a.command == 176).result


def test_alt_hold_throttle_and_guided_mission_item(procs, tmp_path, instances):
    g = ready_vehicle(procs, tmp_path, instances[0])
    assert set_mode(g, "ALT_HOLD") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # full throttle: climbs
        g.m.mav.rc_channels_override_send(1, 1, 1500, 1500, 2000, 1500, 0, 0, 0, 0)
        m = g.recv("GLOBAL_POSITION_INT", 1)
        if m and m.relative_alt > 5000:
            break
    assert m.relative_alt > 5000
    assert set_mode(g, "GUIDED") == ACCEPTED
    here = g.recv("GLOBAL_POSITION_INT", 5)
    lat = here.lat / 1e7 + 30 / 111320
    g.m.mav.mission_item_int_send(1, 1, 0, 3, 16, 2, 1, 0, 0, 0, 0, int(lat * 1e7), here.lon, 8)
    assert g.recv("MISSION_ACK", 5).type == 0
    wait_for(
        lambda: abs(g.recv("GLOBAL_POSITION_INT", 5).lat / 1e7 - lat) * 111320 < 2, timeout=30, what="mission item goto"
    )
    assert g.command(21) == ACCEPTED  # NAV_LAND
    wait_for(lambda: not (g.recv("HEARTBEAT", 5).base_mode & 128), timeout=60, what="landed")
    g.close()


def test_local_ned_targets_velocity_yaw_and_speed(procs, tmp_path, instances):
    """The guided controls scripts use besides go-to: local NED position and velocity, CONDITION_YAW, DO_CHANGE_SPEED."""
    g = ready_vehicle(procs, tmp_path, instances[0])
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert g.command(22, 0, 0, 0, 0, 0, 0, 5) == ACCEPTED
    wait_for(lambda: g.recv("LOCAL_POSITION_NED", 2).z < -4.5, timeout=20, what="5 m")
    # position: 20 m north of home at 6 m (z is down)
    g.m.mav.set_position_target_local_ned_send(0, 1, 1, 1, 0b110111111000, 20, 0, -6, 0, 0, 0, 0, 0, 0, 0, 0)
    wait_for(lambda: abs(g.recv("LOCAL_POSITION_NED", 2).x - 20) < 0.5, timeout=30, what="local NED position")
    # velocity east for a while, then it holds where it is (the 3 s timeout)
    g.m.mav.set_position_target_local_ned_send(0, 1, 1, 1, 0b110111000111, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0)
    wait_for(lambda: g.recv("LOCAL_POSITION_NED", 2).vy > 2.5, timeout=10, what="moving east")
    wait_for(lambda: abs(g.recv("LOCAL_POSITION_NED", 2).vy) < 0.01, timeout=20, what="velocity target timed out")
    assert g.recv("LOCAL_POSITION_NED", 2).y > 5
    assert g.command(115, 90, 0, 1, 0) == ACCEPTED  # CONDITION_YAW to 90° absolute
    wait_for(lambda: abs(g.recv("VFR_HUD", 2).heading - 90) <= 1, timeout=10, what="yaw 90")
    assert g.command(178, 1, 2) == ACCEPTED  # DO_CHANGE_SPEED: 2 m/s
    g.m.mav.set_position_target_local_ned_send(0, 1, 1, 1, 0b110111111000, 0, 0, -6, 0, 0, 0, 0, 0, 0, 0, 0)
    wait_for(lambda: g.recv("VFR_HUD", 2).groundspeed > 1.5, timeout=10, what="moving home")
    assert max(g.recv("VFR_HUD", 2).groundspeed for _ in range(10)) <= 2.01
    g.close()


def _upload(g, items):
    """items: (command, lat, lon, alt); item 0 is home. ArduPilot pulls each with MISSION_REQUEST
    (not _INT: it asks that way whatever the client speaks); clients answer with MISSION_ITEM_INT."""
    g.m.mav.mission_count_send(1, 1, len(items), 0)
    for _ in items:
        req = g.recv("MISSION_REQUEST", 5)
        assert req is not None, "the vehicle asks for each item"
        cmd, lat, lon, alt = items[req.seq]
        g.m.mav.mission_item_int_send(1, 1, req.seq, 6, cmd, 0, 1, 0, 0, 0, 0, int(lat * 1e7), int(lon * 1e7), alt, 0)
    return g.recv("MISSION_ACK", 5)


def test_auto_mission(procs, tmp_path, instances):
    g = ready_vehicle(procs, tmp_path, instances[0])
    assert g.command(512, 242) == ACCEPTED  # REQUEST_MESSAGE HOME_POSITION
    home = g.recv("HOME_POSITION", 5)
    hlat, hlon = home.latitude / 1e7, home.longitude / 1e7
    wlat = hlat + 30 / 111320
    # a mission that does not start with a takeoff cannot start on the ground
    assert _upload(g, [(16, hlat, hlon, 0), (16, wlat, hlon, 10)]).type == 0
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert set_mode(g, "AUTO") == FAILED
    assert "Auto: Missing Takeoff Cmd" in g.seen_texts or g.recv("STATUSTEXT", 5, lambda m: m.text.startswith("Auto:"))
    assert _upload(g, [(16, hlat, hlon, 0), (22, 0, 0, 10), (16, wlat, hlon, 10), (21, 0, 0, 0)]).type == 0
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 4
    g.m.mav.mission_request_int_send(1, 1, 2, 0)
    item = g.recv("MISSION_ITEM_INT", 5)
    assert item.seq == 2 and item.command == 16 and abs(item.x / 1e7 - wlat) < 1e-6 and item.z == 10
    assert set_mode(g, "AUTO") == ACCEPTED
    assert g.recv("MISSION_ITEM_REACHED", 30, lambda m: m.seq == 1), "takeoff done"
    assert g.recv("MISSION_ITEM_REACHED", 30, lambda m: m.seq == 2), "waypoint reached"
    wait_for(lambda: not (g.recv("HEARTBEAT", 5).base_mode & 128), timeout=60, what="landed and disarmed")
    pos = g.recv("GLOBAL_POSITION_INT", 5)
    assert abs(pos.lat / 1e7 - wlat) * 111320 < 3 and pos.relative_alt < 300, "landed at the waypoint"
    g.m.mav.mission_clear_all_send(1, 1, 0)
    assert g.recv("MISSION_ACK", 5).type == 0
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 0
    g.close()
