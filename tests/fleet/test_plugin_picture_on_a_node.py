"""A failing test's report under ``pytest --sitl-ray`` draws the flight picture on the node that
holds the vehicle (its flight recorder is there) and writes the PNG on the driver: no Ray
serialization dump after "flight picture: not drawn"."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_b")  # a second worker and its own shared cluster for half the fleet modules


@pytest.fixture
def fleet(fleet_cluster):
    yield fleet_cluster.fleet
    fleet_cluster.fleet.close_all()


def test_the_failure_picture_of_a_remote_vehicle_is_drawn_on_its_node(fleet, tmp_path):
    from sitlpool.pytest_plugin import _draw

    s = fleet.open(speedup=10)
    try:
        p = _draw(s.link, tmp_path / "pictures" / "test_x-sitl.png", "test_x (sitl)")
        assert p == tmp_path / "pictures" / "test_x-sitl.png"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000
    finally:
        s.close()
