"""``wait_until(condition="failsafe", value=...)`` on the texts ArduCopter and ArduPlane send
(as measured on both binaries: tests/gcs/test_gcs_world_failsafes.py and test_gcs_world_plane.py):
a failsafe's start counts, its end ("... Cleared", Plane's "... off") does not, and each value
matches the words each vehicle uses."""

from types import SimpleNamespace

import pytest

from sitlpool.conditions import predicate


def seen(texts: list[str], value=None) -> bool:
    v = SimpleNamespace(texts=[(10.0 + i, 4, t) for i, t in enumerate(texts)])
    return predicate(None, "failsafe", value)(v, 10.0)  # type: ignore[arg-type]  # failsafe reads only texts


@pytest.mark.parametrize(
    "text, value",
    [
        ("Radio Failsafe", "radio"),
        ("Battery Failsafe", "battery"),
        ("GCS Failsafe", "gcs"),
        ("Circle fence breached", "fence"),
        ("EKF Failsafe: changed to LAND Mode", "ekf"),
        ("RC Short Failsafe On", "radio"),  # ArduPlane
        ("Throttle failsafe on", "radio"),
        ("RC Long Failsafe On: RTL", "radio"),
        ("GCS Failsafe On: RTL", "gcs"),
        ("Battery 1 is low", "battery"),
        ("Battery 1 is critical", "battery"),
    ],
)
def test_a_failsafe_starting_is_seen_by_its_name_and_by_none(text, value):
    assert seen([text], value) and seen([text])
    assert not seen([text], "fence" if value != "fence" else "radio")


@pytest.mark.parametrize(
    "text",
    [
        "Radio Failsafe Cleared",
        "RC Long Failsafe Cleared",
        "Throttle failsafe off",
        "GCS Failsafe Off",
        "Flight plan is low",
    ],
)
def test_an_ending_or_another_text_is_not_a_failsafe(text):
    assert not seen([text]) and not seen([text], "radio") and not seen([text], "gcs")
