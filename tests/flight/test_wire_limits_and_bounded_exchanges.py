"""Values are checked against their MAVLink wire types and the vehicle's limits before
anything is sent; bulk operations are all or nothing (a parameter set is put back, a mission
upload that fails midway puts the previous mission back); every protocol exchange is
bounded in time and in messages, whatever the vehicle does. Driven against a small hostile
MAVLink vehicle on a real TCP socket (``hostile_vehicle.py``)."""

from __future__ import annotations

import threading
import time

import pytest
from hostile_vehicle import A, HostileVehicle

from sitlpool.errors import ConfigError, MavlinkError, SitlpoolError
from sitlpool.flight import Flight, check_finite
from sitlpool.mavlink import mission, params, rc
from sitlpool.mavlink.link import VehicleLink

REAL32, INT8 = A.MAV_PARAM_TYPE_REAL32, A.MAV_PARAM_TYPE_INT8


@pytest.fixture
def vehicle():
    made = []

    def make(**kw) -> tuple[HostileVehicle, VehicleLink]:
        v = HostileVehicle(**kw)
        link = VehicleLink(v.endpoint, name="hostile", stream_hz=0).start()
        made.append((v, link))
        assert link.wait_heartbeat(5), "the hostile vehicle never sent a HEARTBEAT"
        return v, link

    yield make
    for v, link in made:
        link.close()
        v.close()


def in_thread(fn, *a):
    """Run ``fn`` in a thread: (thread, box) where box gets ("ok", value) or ("error", exc)."""
    box: list = []

    def run():
        try:
            box.append(("ok", fn(*a)))
        except BaseException as e:
            box.append(("error", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


# ---- parameters --------------------------------------------------------------------------


def test_a_value_beyond_float32_is_refused_before_any_parameter_is_set(vehicle):
    v, link = vehicle(params={"A": (1.0, REAL32), "B": (2.0, REAL32)})
    for bad in (1e39, -1e39, 10**400):
        with pytest.raises(ConfigError, match="32-bit float|beyond any number"):
            params.set_many(link, {"A": 5, "B": bad})
    assert v.param_sets == [], "a value was set before the bad one was refused"
    with pytest.raises(MavlinkError, match="32-bit float"):
        link.set_param("A", 1e39)
    assert v.param_sets == []


def test_a_value_beyond_its_parameters_type_is_refused_before_anything_is_set(vehicle):
    v, link = vehicle(params={"A": (1.0, REAL32), "SMALL": (5, INT8)})
    with pytest.raises(ConfigError, match="SMALL is int8, from -128 to 127; 300 does not fit"):
        params.set_many(link, {"A": 2, "SMALL": 300})
    with pytest.raises(ConfigError, match="SMALL is a whole number"):
        params.set_many(link, {"A": 2, "SMALL": 1.5})
    assert v.param_sets == []


def test_a_set_refused_midway_puts_back_what_was_set(vehicle):
    v, link = vehicle(params={"A": (1.0, REAL32), "B": (2.0, REAL32), "C": (3.0, REAL32)})
    v.refuse = {"B"}
    with pytest.raises(MavlinkError, match="B kept 2 instead of 20.*set back") as e:
        params.set_many(link, {"A": 10, "B": 20, "C": 30})
    assert v.params["A"][0] == 1.0 and v.params["C"][0] == 3.0, v.params
    assert ("A", 10.0) in v.param_sets and v.param_sets[-3:] == [("A", 1.0), ("B", 2.0), ("C", 3.0)]
    assert "A=1" in str(e.value) and "C=3" in str(e.value)
    assert params.set_many(link, {"A": 10, "C": 30}) == {"set": {"A": 10.0, "C": 30.0}}


def test_a_parameter_list_of_65535_announced_is_refused_at_once(vehicle):
    v, link = vehicle(params={"A": (1.0, REAL32), "B": (2.0, REAL32)})
    assert params.get_all(link)["params"] == {"A": 1.0, "B": 2.0}
    v.param_count = 65535
    t0 = time.monotonic()
    with pytest.raises(MavlinkError, match="65535.*at most 10,000"):
        params.get_all(link)
    assert time.monotonic() - t0 < 5


# ---- missions ----------------------------------------------------------------------------

WAYPOINT = {"command": "waypoint", "lat": -35.36, "lon": 149.16, "alt_m": 20}


@pytest.mark.parametrize(
    "field,value,why",
    [
        ("seconds", 1e39, "seconds"),
        ("seconds", 70000, "seconds"),
        ("alt_m", 1e39, "alt_m"),
        ("alt_m", 20000, "alt_m"),
        ("lat", 10**400, "lat"),
    ],
    ids=["seconds-1e39", "seconds-70000", "alt-1e39", "alt-20km", "lat-huge-int"],
)
def test_a_bad_item_is_refused_before_the_upload_begins(vehicle, field, value, why):
    v, link = vehicle()
    v.home_and(5)
    before = v.mission_alts()
    items = [dict(WAYPOINT) for _ in range(5)]
    items[3][field] = value
    with pytest.raises(ConfigError, match=f"item 4 \\(waypoint\\): field '{why}'"):
        mission.upload(link, items)
    assert v.counts == [] and v.mission_alts() == before, "the vehicle's mission was touched"


def test_an_upload_failing_midway_puts_the_previous_mission_back(vehicle):
    v, link = vehicle()
    v.home_and(5)
    before = v.mission_alts()
    v.fail_upload_at = 3
    with pytest.raises(MavlinkError, match="refused by the vehicle.*previous mission \\(5 items\\) was put back"):
        mission.upload(link, [dict(WAYPOINT, alt_m=99) for _ in range(4)])
    assert v.mission_alts() == before, "the vehicle was left with a mixed mission"
    assert mission.upload(link, [dict(WAYPOINT, alt_m=99)])["uploaded"] == 1
    assert v.mission_alts()[1:] == [99.0]


def test_an_upload_to_a_vehicle_asking_for_item_0_forever_ends(vehicle):
    v, link = vehicle()
    v.home_and(2)
    v.ask_item0_forever = True
    t0 = time.monotonic()
    t, box = in_thread(mission.upload, link, [dict(WAYPOINT) for _ in range(3)])
    t.join(30)
    assert box, "upload_mission never ended against a vehicle asking for item 0 forever"
    kind, err = box[0]
    assert kind == "error" and isinstance(err, MavlinkError) and "again" in str(err), box
    assert time.monotonic() - t0 < mission.DOWNLOAD_TIMEOUT_S + mission.UPLOAD_TIMEOUT_S
    assert v.requests < 60


def test_a_download_of_65535_announced_items_is_refused_at_once(vehicle):
    v, link = vehicle()
    v.announce = 65535
    t0 = time.monotonic()
    t, box = in_thread(mission.download, link)
    t.join(30)
    assert box and box[0][0] == "error" and "65,535 items" in str(box[0][1]), box
    assert time.monotonic() - t0 < 5


def test_a_download_answered_with_the_wrong_item_forever_ends(vehicle):
    v, link = vehicle()
    v.home_and(3)
    v.wrong_item_forever = True
    t, box = in_thread(mission.download, link)
    t.join(30)
    assert box and box[0][0] == "error" and "keeps sending item 0" in str(box[0][1]), box


def test_exchanges_are_bounded_in_total_time(vehicle, monkeypatch):
    """A vehicle that answers each step in time but never finishes is stopped by the
    exchange's overall deadline, not only by the step timeout."""
    v, link = vehicle()
    v.home_and(1)
    v.announce = 5000  # items it will make up, each answered at once
    monkeypatch.setattr(mission, "DOWNLOAD_TIMEOUT_S", 0.3)
    t, box = in_thread(mission.download, link)
    t.join(30)
    assert box and box[0][0] == "error" and "did not finish in time" in str(box[0][1]), box


# ---- single commands ---------------------------------------------------------------------


def test_goto_takeoff_commands_and_rc_refuse_what_their_fields_cannot_carry(vehicle):
    _, link = vehicle()
    with pytest.raises(ConfigError, match="goto latitude"):
        link.goto(10**400, 0, 10)
    with pytest.raises(ConfigError, match="not a position on Earth"):
        link.goto(91, 0, 10)
    with pytest.raises(ConfigError, match="goto altitude.*32-bit float"):
        link.goto(-35, 149, 1e39)
    with pytest.raises(ConfigError, match="takeoff altitude"):
        link.takeoff(1e39)
    with pytest.raises(ConfigError, match="parameter 1.*32-bit float"):
        link.command(A.MAV_CMD_DO_SET_MODE, 1e39)
    with pytest.raises(ConfigError, match="x.*int32"):
        link.command_int(A.MAV_CMD_DO_REPOSITION, 0, x=2**40)
    with pytest.raises(ConfigError, match="not a PWM value"):
        rc.check_channels({"3": 10**400})
    with pytest.raises(ConfigError, match="seconds"):
        rc.override(link, {"3": 1500}, 10**400)
    for bad in (float("inf"), 10**400, -1, 2.5):
        with pytest.raises(ConfigError, match="mission_item needs the item number"):
            mission.predicate(link, "mission_item", bad)
    # whatever still reaches the wire unchecked is refused as a MavlinkError, never a traceback
    with pytest.raises(MavlinkError, match="cannot be sent"):
        link.send(A.MAVLink_param_set_message(1, 1, b"X", 1e39, REAL32))


def test_flight_checks_never_overflow():
    with pytest.raises(SitlpoolError, match="out of range"):
        check_finite(10**400, "speedup")
    with pytest.raises(SitlpoolError, match="32-bit floats"):
        check_finite("1e39", "timeout_s")
    with pytest.raises(SitlpoolError, match="out of range"):
        check_finite(10**4000, "x", 0, 10)


def test_arm_when_ready_lives_in_the_flight_layer():
    """The MAVLink layer imports nothing above it: the retry loop is Flight's."""
    assert not hasattr(VehicleLink, "arm_when_ready")
    assert callable(Flight.arm_when_ready)


def test_launch_parameters_are_checked_before_anything_is_launched(env, data_dir):
    from sitlpool.config import load_settings
    from sitlpool.process import ManagedManager

    m = ManagedManager(load_settings())
    for bad in (1e39, 10**400, "inf", "fast"):
        with pytest.raises(ConfigError, match="parameter RTL_ALT"):
            m.start("x", params={"RTL_ALT": bad})
    sessions = data_dir / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir()), "a SITL was launched for refused parameters"
    assert m.processes == {}
