"""The batch tools over MCP (``sitlpool serve`` on stdio, the real SDK client): batch_fly
returns its id at once and flies in the background, batch_status follows it to done,
batch_compare answers with the statistics and a PNG; bad input is one tool error line."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from mcp_client import ToolFailed, server

pytestmark = pytest.mark.anyio

STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_batch_fly_status_compare_over_mcp(env):
    async with server(env) as call:
        t0 = time.monotonic()
        out = await call(
            "batch_fly",
            variants={"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
            runs=2,
            steps=STEPS,
            metrics=["time_to_alt_s"],
            speedup=20,
        )
        assert set(out) == {"batch_id"} and time.monotonic() - t0 < 10
        bid = out["batch_id"]
        for _ in range(240):
            st = await call("batch_status", batch_id=bid)
            if st["state"] != "running":
                break
            await anyio.sleep(0.5)
        assert st["state"] == "done" and st["done"] == 4 and st["failed"] == 0, st["failures"]
        r = await call.session.call_tool("batch_compare", {"batch_id": bid})
        assert not r.is_error
        kinds = [c.type for c in r.content]
        assert kinds == ["image", "text"] and r.content[0].mime_type == "image/png"
        doc = json.loads(r.content[1].text)
        row = next(x for x in doc["tests"] if x["metric"] == "time_to_alt_s")
        assert {"p_value", "p_adjusted", "significant"} <= set(row)
        with pytest.raises(ToolFailed, match="runs must be a whole number from 1 to 1000"):
            await call("batch_fly", variants={"A": {}, "B": {"params": {"X": 1}}}, runs=0, steps=STEPS)
        with pytest.raises(ToolFailed, match="unknown batch"):
            await call("batch_status", batch_id="20990101-000000-abcdef")
