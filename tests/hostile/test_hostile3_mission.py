"""Hostile pass 3 on fences: upload_mission(fence=...) refuses a polygon of fewer than three
vertices ("is not a polygon") but takes three copies of one point, or three points on one line:
shapes of no area, which no vehicle can be inside. An inclusion fence of that shape breaches at
once wherever the vehicle is. One line naming the shape, as for two vertices; nothing sent."""

from __future__ import annotations

import pytest

from sitlpool.errors import ConfigError
from sitlpool.mavlink.missionfiles import fence_items

SHAPES = {
    "one-point-thrice": [[-35.36, 149.16], [-35.36, 149.16], [-35.36, 149.16]],
    "collinear": [[-35.36, 149.16], [-35.37, 149.16], [-35.38, 149.16]],
}


@pytest.mark.parametrize("polygon", list(SHAPES.values()), ids=list(SHAPES))
def test_a_fence_polygon_of_no_area_is_not_a_polygon(polygon):
    with pytest.raises(ConfigError) as e:
        fence_items([{"polygon": polygon, "inclusion": True}])
    assert "shape 1" in str(e.value) and "polygon" in str(e.value) and "\n" not in str(e.value)
