"""The built-in vehicle behaves as real ArduCopter 4.7.0-dev does where a ground station can
tell (each expectation was measured on the real binary, see ../shared/ardupilot)."""

import math
import struct
import time

from conftest import Gcs, start_sim, wait_for
from sitlpool.instances import ports
from sitlpool.sim.copter import MODES

ACCEPTED, DENIED, UNSUPPORTED, FAILED = 0, 2, 3, 4
HOME = (-35.363261, 149.165230, 584.0)
EKF_POS_HORIZ_ABS = 0x10
PREARM_BIT = 0x10000000  # MAV_SYS_STATUS_PREARM_CHECK


def gcs(n, serial="serial0", hello=True):
    g = Gcs(getattr(ports(n), serial))
    g.heartbeat()
    if hello:  # a GCS that has spoken: ArduPilot sends STATUSTEXTs only to such links
        g.m.mav.heartbeat_send(6, 8, 0, 0, 0)
    return g


def set_mode(g, name):
    g.m.set_mode(MODES[name])
    return g.recv("COMMAND_ACK", 5, lambda a: a.command == 176).result


def text_seen(g, text, timeout=10):
    return text in g.seen_texts or g.recv("STATUSTEXT", timeout, lambda m: m.text == text) is not None


def ready(procs, tmp_path, n, *args):
    """A vehicle at speedup 10 whose EKF uses GPS after 1 s of sim time, streams asked for."""
    start_sim(
        procs, tmp_path, n, "--speedup", 10, "--ready-delay", 1, "--home", ",".join(map(str, (*HOME, 353))), *args
    )
    g = gcs(n)
    g.m.mav.request_data_stream_send(1, 1, 0, 4, 1)
    wait_for(lambda: g.recv("EKF_STATUS_REPORT", 2, lambda m: m.flags & EKF_POS_HORIZ_ABS), what="EKF using GPS")
    return g


def rel_alt(g):
    return g.recv("GLOBAL_POSITION_INT", 5).relative_alt / 1000


def test_boot_timeline_prearm_bit_and_guided_arming(procs, tmp_path, instances):
    """Real SITL: GPS detected at ~9.8 s, pre-arm passes ~23.5 s, EKF uses GPS ~41.5 s of sim
    time; GUIDED is accepted disarmed at once, arming in it waits for the position."""
    n = instances[0]
    start_sim(procs, tmp_path, n, "--speedup", 10, "--home", "-35.363261,149.165230,584,353")  # separate, negative
    g = gcs(n)
    stamps = {}

    def watch(m):
        if m.get_type() == "SYSTEM_TIME":
            stamps["now"] = m.time_boot_ms
        if m.get_type() == "STATUSTEXT" and m.text not in stamps:
            stamps[m.text] = stamps.get("now", 0)
        return False

    g.m.message_hooks.append(lambda _, m: watch(m))
    assert g.recv("SYS_STATUS", 0.5) is None, "nothing but HEARTBEAT until asked"
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 0, "no home yet: no item 0"
    g.m.mav.param_set_send(1, 1, b"DISARM_DELAY", 0, 2)  # no auto-disarm between our commands
    for msg_id in (1, 2, 193):  # SYS_STATUS, SYSTEM_TIME, EKF_STATUS_REPORT at 5 Hz of sim time
        assert g.command(511, msg_id, 200000) == ACCEPTED
    first = g.recv("SYS_STATUS", 5)
    assert first.onboard_control_sensors_present & PREARM_BIT and first.onboard_control_sensors_enabled & PREARM_BIT
    assert not first.onboard_control_sensors_health & PREARM_BIT
    assert g.command(400, 1) == FAILED
    said = any(t.startswith("Arm: ") for t in g.seen_texts)  # (the text follows the ACK)
    assert said or g.recv("STATUSTEXT", 5, lambda m: m.text.startswith("Arm: ")), g.seen_texts
    assert g.recv("SYS_STATUS", 5, lambda m: m.onboard_control_sensors_present & 0x20), "GPS detected"
    assert set_mode(g, "GUIDED") == ACCEPTED  # before any position
    ok = g.recv("SYS_STATUS", 15, lambda m: m.onboard_control_sensors_health & PREARM_BIT)
    assert ok, "pre-arm checks pass"
    assert g.command(400, 1) == FAILED  # in GUIDED: no position yet
    assert text_seen(g, "Arm: Need Position Estimate", 5)
    wait_for(
        lambda: (
            g.recv("STATUSTEXT", 1, lambda m: m.text == "EKF3 IMU0 is using GPS")
            or "EKF3 IMU0 is using GPS" in g.seen_texts
        ),
        timeout=15,
        what="EKF using GPS",
    )
    assert g.recv("EKF_STATUS_REPORT", 5).flags & EKF_POS_HORIZ_ABS
    assert 8000 < stamps["GPS 1: detected u-blox"] < 12000, stamps
    assert 18000 < stamps["EKF3 IMU0 origin set"] < 22000, stamps
    assert 39000 < stamps["EKF3 IMU0 is using GPS"] < 44000, stamps
    assert g.command(400, 1) == ACCEPTED
    assert g.command(22, 0, 0, 0, 0, 0, 0, 5) == ACCEPTED
    g.close()


def test_mode_set_while_booting_is_undone(procs, tmp_path, instances):
    """A mode set in the vehicle's first ~0.5 s (HEARTBEAT system_status BOOT, before "ArduPilot
    Ready") is ACKed, then replaced by the initial mode: arming then works early (STABILIZE) and
    NAV_TAKEOFF is refused (FAILED, no text) until GUIDED is entered again (real SITL's behaviour
    behind the "GUIDED in the first second" trap)."""
    n = instances[0]
    start_sim(procs, tmp_path, n, "--speedup", 10)
    g = gcs(n)
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.recv("HEARTBEAT", 5, lambda h: h.system_status == 1 and h.custom_mode == MODES["GUIDED"]), "booting"
    assert g.recv("HEARTBEAT", 5, lambda h: h.system_status == 3).custom_mode == MODES["STABILIZE"]
    assert "ArduPilot Ready" in g.seen_texts
    g.m.mav.param_set_send(1, 1, b"DISARM_DELAY", 0, 2)
    assert g.command(511, 1, 200000) == ACCEPTED
    assert g.recv("SYS_STATUS", 15, lambda m: m.onboard_control_sensors_health & PREARM_BIT)
    assert g.command(400, 1) == ACCEPTED, g.seen_texts  # in STABILIZE: no position needed
    assert g.command(22, 0, 0, 0, 0, 0, 0, 10) == FAILED
    assert g.command(400, 0) == ACCEPTED
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == FAILED and text_seen(g, "Arm: Need Position Estimate", 5)
    assert text_seen(g, "EKF3 IMU0 is using GPS", 15)
    assert g.command(400, 1) == ACCEPTED
    assert g.command(22, 0, 0, 0, 0, 0, 0, 10) == ACCEPTED
    g.close()


def test_messages_streams_commands_and_modes(procs, tmp_path, instances):
    n = instances[0]
    g = ready(procs, tmp_path, n)
    quiet = gcs(n, "serial1", hello=False)
    seen = {quiet.recv("HEARTBEAT", 3).get_type()}
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        m = quiet.m.recv_match(blocking=True, timeout=0.1)
        if m:
            seen.add(m.get_type())
    assert seen <= {"HEARTBEAT", "TIMESYNC", "HOME_POSITION", "GPS_GLOBAL_ORIGIN", "SYS_STATUS"}, seen
    quiet.m.mav.request_data_stream_send(1, 1, 0, 4, 1)  # MAV_DATA_STREAM_ALL, as ArduPilot's autotest asks
    want = {
        "EKF_STATUS_REPORT",
        "RC_CHANNELS",
        "SERVO_OUTPUT_RAW",
        "POWER_STATUS",
        "NAV_CONTROLLER_OUTPUT",
        "AHRS",
        "AHRS2",
        "VIBRATION",
        "MEMINFO",
        "SYS_STATUS",
        "GPS_RAW_INT",
        "GLOBAL_POSITION_INT",
        "LOCAL_POSITION_NED",
        "ATTITUDE",
        "VFR_HUD",
        "BATTERY_STATUS",
        "SYSTEM_TIME",
        "MISSION_CURRENT",
        "RAW_IMU",
        "SCALED_PRESSURE",
    }
    got = set()
    t_end = time.monotonic() + 10
    while not want <= got and time.monotonic() < t_end:
        m = quiet.m.recv_match(blocking=True, timeout=0.5)
        if m:
            got.add(m.get_type())
    assert want <= got, want - got
    g.m.mav.param_request_read_send(1, 1, b"MAV2_EXT_STAT", -1)  # the asked rate is kept, as ArduPilot keeps it
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "MAV2_EXT_STAT").param_value == 4
    # or through the port's MAVn_ stream-rate parameters (SERIAL1 is MAV2)
    quiet.close()
    quiet = gcs(n, "serial1", hello=False)
    g.m.mav.param_set_send(1, 1, b"MAV2_EXTRA2", 2, 4)
    assert quiet.recv("VFR_HUD", 5) is not None
    # EXTENDED_SYS_STATE on request (MAVSDK's in_air / landed_state)
    assert g.command(511, 245, 200000) == ACCEPTED
    assert g.recv("EXTENDED_SYS_STATE", 5).landed_state == 1  # MAV_LANDED_STATE_ON_GROUND
    # AUTOPILOT_VERSION and HOME_POSITION on REQUEST_MESSAGE (MAVSDK's info / telemetry.home)
    assert g.command(512, 148) == ACCEPTED
    v = g.recv("AUTOPILOT_VERSION", 5)
    assert v.flight_sw_version >> 16 == 0x0407 and bytes(v.flight_custom_version) == b"90700977"
    assert g.command(512, 242) == ACCEPTED
    home = g.recv("HOME_POSITION", 5)
    assert abs(home.latitude / 1e7 - HOME[0]) < 1e-6 and abs(home.altitude / 1000 - HOME[2]) < 0.01
    assert g.command(410) == ACCEPTED and g.recv("HOME_POSITION", 5)  # MAV_CMD_GET_HOME_POSITION
    # commands as ArduCopter answers them on the ground
    assert g.command(300) == ACCEPTED  # MISSION_START: switches to AUTO, even with no mission
    assert g.recv("HEARTBEAT", 5, lambda h: h.custom_mode == MODES["AUTO"])
    assert g.command(192, 0, 0, 0, 0, HOME[0], HOME[1], 600) == UNSUPPORTED  # DO_REPOSITION only as COMMAND_INT
    assert g.command(241) == UNSUPPORTED  # PREFLIGHT_CALIBRATION
    assert g.command(115, 90) == ACCEPTED  # CONDITION_YAW
    assert g.command(178, 1, 0) == DENIED  # DO_CHANGE_SPEED 0
    assert g.command(178, 1, 5) == ACCEPTED  # in AUTO (MISSION_START switched to it)
    assert set_mode(g, "STABILIZE") == ACCEPTED
    assert g.command(178, 1, 5) == FAILED  # a speed, but not in a mode that flies to a target
    assert g.command(183, 9, 1500) == ACCEPTED and g.command(183, 1, 1500) == FAILED  # DO_SET_SERVO: not a motor
    # modes: every mode ArduCopter has is accepted disarmed; the ones it cannot enter say why
    for name in ("SMART_RTL", "DRIFT", "ZIGZAG", "THROW", "CIRCLE", "GUIDED_NOGPS", "AVOID_ADSB", "ACRO", "BRAKE"):
        assert set_mode(g, name) == ACCEPTED, name
    assert set_mode(g, "FLIP") == FAILED and text_seen(g, "Mode change to FLIP failed: init failed", 3)
    assert set_mode(g, "SPORT") == FAILED and text_seen(g, "No such mode 13", 3)
    # STATUSTEXTs reach every GCS that has spoken, not only the one that asked
    other = gcs(n, "serial2")
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert text_seen(other, "Arming motors", 5)
    # parameters: 4.7 names
    g.m.mav.param_request_read_send(1, 1, b"MAV_SYSID", -1)
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "MAV_SYSID").param_count == 1354
    # MAVFTP: the packed parameter file, as MAVProxy downloads it (fast), anything else refused
    assert _ftp_params(g) == 1354
    g.m.mav.file_transfer_protocol_send(
        0, 1, 1, list((struct.pack("<HBBBBBBI", 9, 0, 4, 5, 0, 0, 0, 0) + b"/nope").ljust(251, b"\0"))
    )
    nak = g.recv("FILE_TRANSFER_PROTOCOL", 5)
    assert nak.payload[3] == 129 and nak.payload[5] == 4 and nak.payload[12] == 10  # NAK OpenFileRO: not found
    assert g.m.mav_count > 100 and g.m.mav_loss == 0, "packets numbered per link, none missing"
    other.close()
    quiet.close()
    g.close()


def _ftp_params(g) -> int:
    """Download @PARAM/param.pck over MAVFTP (OpenFileRO, BurstReadFile); the parameter count."""
    from MAVProxy.modules.lib.param_ftp import ftp_param_decode

    def op(seq, opcode, data=b"", offset=0, size=None):
        head = struct.pack("<HBBBBBBI", seq, 0, opcode, len(data) if size is None else size, 0, 0, 0, offset)
        g.m.mav.file_transfer_protocol_send(0, 1, 1, list((head + data).ljust(251, b"\0")))

    op(1, 4, b"@PARAM/param.pck?withdefaults=1")
    ack = g.recv("FILE_TRANSFER_PROTOCOL", 5)
    assert ack.payload[3] == 128, "ACK to OpenFileRO"
    total = struct.unpack("<I", bytes(ack.payload[12:16]))[0]
    content = bytearray(total)
    op(2, 15, size=239)
    while True:
        r = bytes(g.recv("FILE_TRANSFER_PROTOCOL", 5).payload)
        n, ofs = r[4], struct.unpack("<I", r[8:12])[0]
        content[ofs : ofs + n] = r[12 : 12 + n]
        if r[6]:  # burst complete
            break
    op(3, 1)
    assert g.recv("FILE_TRANSFER_PROTOCOL", 5).payload[3] == 128
    decoded = ftp_param_decode(bytes(content))
    assert dict((k.decode(), v) for k, v, _ in decoded.params)["WPNAV_SPEED"] == 1000
    return len(decoded.params)


def _goto(g, frame, dn, alt):
    here = g.recv("GLOBAL_POSITION_INT", 5)
    lat = here.lat / 1e7 + dn / 111320
    g.m.mav.set_position_target_global_int_send(
        0, 1, 1, frame, 0xFF8, int(lat * 1e7), here.lon, alt, 0, 0, 0, 0, 0, 0, 0, 0
    )
    return lat


def _arrived(g, lat, alt, tol=0.5):
    def near():
        m = g.recv("GLOBAL_POSITION_INT", 5)
        return abs(m.lat / 1e7 - lat) * 111320 < 1 and abs(m.relative_alt / 1000 - alt) < tol and abs(m.vz) < 20

    wait_for(near, timeout=20, what=f"arrival at {alt} m")


def test_takeoff_speed_goto_frames_land_and_home_reset(procs, tmp_path, instances):
    g = ready(procs, tmp_path, instances[0])
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert g.command(511, 245, 500000) == ACCEPTED
    t0 = g.recv("GLOBAL_POSITION_INT", 5).time_boot_ms
    assert g.command(22, 0, 0, 0, 0, 0, 0, 10) == ACCEPTED
    assert g.recv("EXTENDED_SYS_STATE", 5, lambda m: m.landed_state in (2, 3))  # taking off / in air
    up = g.recv("GLOBAL_POSITION_INT", 30, lambda m: m.relative_alt > 9500)
    took = (up.time_boot_ms - t0) / 1000
    assert 7.0 < took < 11.5, f"10 m in {took:.1f} s of sim time (real ArduCopter: ~8.7 s)"
    # SET_POSITION_TARGET_GLOBAL_INT: GLOBAL_INT is AMSL, RELATIVE_ALT_INT above home
    lat = _goto(g, 5, 20, HOME[2] + 15)
    _arrived(g, lat, 15)
    lat = _goto(g, 6, 20, 12)
    _arrived(g, lat, 12)
    # DO_REPOSITION as COMMAND_INT in MAV_FRAME_GLOBAL: AMSL
    here = g.recv("GLOBAL_POSITION_INT", 5)
    lat = here.lat / 1e7 + 20 / 111320
    g.m.mav.command_int_send(1, 1, 0, 192, 0, 0, -1, 1, 0, math.nan, int(lat * 1e7), here.lon, HOME[2] + 8)
    assert g.recv("COMMAND_ACK", 5, lambda a: a.command == 192).result == ACCEPTED
    _arrived(g, lat, 8)
    # a guided MISSION_ITEM (current=2, float degrees), as dronekit's simple_goto sends it
    here = g.recv("GLOBAL_POSITION_INT", 5)
    lat = here.lat / 1e7 + 20 / 111320
    g.m.mav.mission_item_send(1, 1, 0, 3, 16, 2, 1, 0, 0, 0, 0, lat, here.lon / 1e7, 10)
    assert g.recv("MISSION_ACK", 5).type == 0
    _arrived(g, lat, 10)
    away = g.recv("GLOBAL_POSITION_INT", 5)
    assert g.command(21) == ACCEPTED  # NAV_LAND (MAVSDK's action.land)
    assert g.recv("EXTENDED_SYS_STATE", 10, lambda m: m.landed_state == 4)  # landing
    assert text_seen(g, "Disarming motors", 30)
    assert g.recv("EXTENDED_SYS_STATE", 5).landed_state == 1
    # home moves to where the vehicle arms
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert g.command(512, 242) == ACCEPTED
    home = g.recv("HOME_POSITION", 5)
    assert abs(home.latitude - away.lat) < 200 and (home.latitude / 1e7 - HOME[0]) * 111320 > 50
    g.close()


def _upload_float(g, items):
    """A MISSION_ITEM-speaking client (dronekit): answers each MISSION_REQUEST with MISSION_ITEM."""
    g.m.mav.mission_count_send(1, 1, len(items), 0)
    for _ in items:
        req = g.recv("MISSION_REQUEST", 5)
        assert req is not None, "ArduPilot asks with MISSION_REQUEST"
        frame, cmd, lat, lon, alt = items[req.seq]
        g.m.mav.mission_item_send(1, 1, req.seq, frame, cmd, 0, 1, 0, 0, 0, 0, lat, lon, alt)
    return g.recv("MISSION_ACK", 5)


def test_mission_protocol_frames_and_reboot(procs, tmp_path, instances):
    n = instances[0]
    g = ready(procs, tmp_path, n)
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 1, "an empty mission has home as item 0"
    g.m.mav.mission_request_int_send(1, 1, 0, 0)
    h = g.recv("MISSION_ITEM_INT", 5)
    assert h.frame == 0 and abs(h.z - HOME[2]) < 0.01 and abs(h.x / 1e7 - HOME[0]) < 1e-6
    wlat, wlon = HOME[0] + 0.0003, HOME[1]
    items = [
        (0, 16, HOME[0], HOME[1], HOME[2]),
        (3, 22, 0, 0, 10),
        (0, 16, wlat, wlon, 620.0),
        (10, 16, wlat, wlon + 0.0003, 15.0),
        (3, 20, 0, 0, 0),
    ]
    assert _upload_float(g, items).type == 0
    assert text_seen(g, "got MISSION_ITEM; GCS should send MISSION_ITEM_INT", 3)
    for seq in (2, 3):  # frames and altitudes come back as uploaded (AMSL stays AMSL, terrain stays terrain)
        g.m.mav.mission_request_int_send(1, 1, seq, 0)
        it = g.recv("MISSION_ITEM_INT", 5, lambda m: m.seq == seq)
        assert (it.frame, it.z) == (items[seq][0], items[seq][4]) and abs(it.x / 1e7 - wlat) < 1e-6
    g.m.mav.mission_request_send(1, 1, 2, 0)  # not _INT: answered with MISSION_ITEM and a warning
    it = g.recv("MISSION_ITEM", 5)
    assert it.seq == 2 and it.frame == 0 and it.z == 620
    assert text_seen(g, "got MISSION_REQUEST; use MISSION_REQUEST_INT!", 3)
    assert g.command(224, 3) == ACCEPTED  # DO_SET_MISSION_CURRENT
    assert g.recv("MISSION_CURRENT", 5, lambda m: m.seq == 3)
    assert g.command(224, 9) == DENIED  # no such item (real ArduCopter 4.7)
    assert g.command(246, 1) == ACCEPTED  # reboot
    g.close()
    wait_for(lambda: (tmp_path / "stdout").read_text().count("Waiting for connection") == 2, what="reboot")
    g = Gcs(ports(n).serial0)
    # at once, while it boots: no room for a mission yet (as ArduCopter: "Only 0 items are supported")
    g.m.mav.mission_count_send(1, 1, 2, 0)
    assert g.recv("MISSION_ACK", 5).type == 4  # MAV_MISSION_NO_SPACE
    assert text_seen(g, "Only 0 items are supported", 3)
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 5, "the mission survives a reboot (eeprom.bin)"
    assert g.recv("HEARTBEAT", 5, lambda h: h.system_status == 3), "booted"
    # an upload whose client goes quiet: asked again every second, cancelled after 8 s (sim time)
    g.m.mav.mission_count_send(1, 1, 2, 0)
    assert g.recv("MISSION_REQUEST", 5, lambda m: m.seq == 0) and g.recv("MISSION_REQUEST", 5, lambda m: m.seq == 0)
    assert g.recv("MISSION_ACK", 5).type == 15  # MAV_MISSION_OPERATION_CANCELLED
    assert text_seen(g, "Mission upload timeout", 3)
    g.m.mav.param_request_read_send(1, 1, b"MAV1_EXT_STAT", -1)  # a REQUEST_DATA_STREAM's rate is not saved
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "MAV1_EXT_STAT").param_value == 0
    g.m.mav.mission_clear_all_send(1, 1, 0)
    assert g.recv("MISSION_ACK", 5).type == 0
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 0
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED  # arming writes home: item 0 again
    g.m.mav.mission_request_list_send(1, 1, 0)
    assert g.recv("MISSION_COUNT", 5).count == 1
    g.close()


def test_mission_rtl_flown_in_auto_and_progress(procs, tmp_path, instances):
    g = ready(procs, tmp_path, instances[0])
    for name, value in (("RTL_LOIT_TIME", 0), ("RTL_ALT", 800), ("LAND_ALT_LOW", 300)):
        g.m.mav.param_set_send(1, 1, name.encode(), value, 6)
        assert g.recv("PARAM_VALUE", 5, lambda m, name=name: m.param_id == name).param_value == value
    wlat = HOME[0] + 25 / 111320
    g.m.mav.mission_count_send(1, 1, 4, 0)
    items = [(0, 16, HOME[0], HOME[1], HOME[2]), (3, 22, 0, 0, 6), (3, 16, wlat, HOME[1], 6), (3, 20, 0, 0, 0)]
    for _ in items:
        req = g.recv("MISSION_REQUEST", 5)
        f, c, la, lo, al = items[req.seq]
        g.m.mav.mission_item_int_send(1, 1, req.seq, f, c, 0, 1, 0, 0, 0, 0, int(la * 1e7), int(lo * 1e7), al, 0)
    assert g.recv("MISSION_ACK", 5).type == 0
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert g.command(300) == ACCEPTED  # MAV_CMD_MISSION_START (MAVSDK's start_mission)
    assert g.recv("MISSION_CURRENT", 5, lambda m: m.mission_state == 3 and m.mission_mode == 1)  # active
    assert g.recv("MISSION_ITEM_REACHED", 30, lambda m: m.seq == 1)
    assert g.recv("MISSION_ITEM_REACHED", 30, lambda m: m.seq == 2)
    assert text_seen(g, "Mission: 3 RTL", 3)
    modes = set()
    while True:
        hb = g.recv("HEARTBEAT", 5)
        modes.add(hb.custom_mode)
        if not hb.base_mode & 128:
            break
    assert modes == {MODES["AUTO"]}, "Copter flies a mission's RTL inside AUTO"
    m = g.recv("GLOBAL_POSITION_INT", 5)
    assert abs(m.lat / 1e7 - HOME[0]) * 111320 < 1.5 and m.relative_alt < 300, "landed at home"
    assert g.recv("MISSION_CURRENT", 5, lambda m: m.mission_state == 5)  # complete
    g.close()


def test_battery_never_blocks_arming(procs, tmp_path, instances):
    """Real SITL's battery keeps its voltage; a drained capacity does not refuse arming."""
    g = ready(procs, tmp_path, instances[0])
    g.m.mav.param_set_send(1, 1, b"BATT_CAPACITY", 20, 6)
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "BATT_CAPACITY")
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED
    assert g.command(22, 0, 0, 0, 0, 0, 0, 3) == ACCEPTED
    b = g.recv("BATTERY_STATUS", 30, lambda m: m.battery_remaining == 0)
    assert b is not None and b.voltages[0] == 12600
    assert g.command(21) == ACCEPTED
    assert text_seen(g, "Disarming motors", 40)
    assert set_mode(g, "GUIDED") == ACCEPTED
    assert g.command(400, 1) == ACCEPTED, g.seen_texts
    g.close()
