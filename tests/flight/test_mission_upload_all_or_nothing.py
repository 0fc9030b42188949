"""A mission upload is all or nothing on the built-in vehicle and on real ArduCopter: when
the vehicle refuses an item midway (ArduPilot has by then replaced part of its mission),
the previous mission is put back; a whole upload still replaces it. The refusal is made
real: item 2 is sent in a frame ArduPilot does not take (a fault injected on our side)."""

from __future__ import annotations

import pytest

from sitlpool.config import load_settings
from sitlpool.errors import MavlinkError
from sitlpool.mavlink import mission
from sitlpool.mavlink.link import A
from sitlpool.process import ManagedManager

HOME = (-35.3632621, 149.1652374)


def wp(i: int, alt: float) -> dict:
    return {"command": "waypoint", "lat": HOME[0] + 0.0001 * i, "lon": HOME[1], "alt_m": alt}


@pytest.fixture
def copter(env, vehicle_binary):
    overrides = {"sitl_binary": vehicle_binary} if vehicle_binary else {}
    m = ManagedManager(load_settings(**overrides))
    h = m.start("mission", speedup=5)
    yield h.link
    m.close_all()


def test_a_refused_upload_puts_the_previous_mission_back(copter, monkeypatch):
    link = copter
    first = [{"command": "takeoff", "alt_m": 10}, wp(1, 20), wp(2, 30), {"command": "rtl"}]
    assert mission.upload(link, first)["uploaded"] == 4
    before = mission.download(link)["items"]
    assert [it.get("alt_m") for it in before] == [10, 20, 30, None]

    made = mission.item_message

    def body_frame_at_2(link, seq, it):  # ArduPilot takes no body frame for a waypoint: refused at item 2
        msg = made(link, seq, it)
        if seq == 2:
            msg.frame = A.MAV_FRAME_BODY_FRD
        return msg

    monkeypatch.setattr(mission, "item_message", body_frame_at_2)
    with pytest.raises(MavlinkError, match="refused by the vehicle.*previous mission \\(4 items\\) was put back"):
        mission.upload(link, [wp(1, 50), wp(2, 60), wp(3, 70)])
    monkeypatch.undo()
    assert mission.download(link)["items"] == before, "the vehicle kept a mixed mission"
    assert mission.upload(link, [wp(1, 50)])["uploaded"] == 1
    assert [it["alt_m"] for it in mission.download(link)["items"]] == [50]
