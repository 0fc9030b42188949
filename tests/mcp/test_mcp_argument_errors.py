"""Arguments the tool's schema refuses get one line naming each argument and what it takes,
through the real MCP client over stdio (the SDK's own text is a multi-line pydantic dump with
a URL). NaN and infinity cannot be written in JSON: the Python MCP client sends them as null,
and the answer says so instead of "Input should be a valid number"."""

from __future__ import annotations

import math

import pytest

from mcp_client import ToolFailed, server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def refusal(call, tool: str, **args) -> str:
    with pytest.raises(ToolFailed) as e:
        await call(tool, **args)
    return str(e.value)


async def test_schema_refusals_are_one_line_naming_the_argument(env):
    async with server(env) as call:
        nan = await refusal(call, "set_wind", session_id="x", speed_m_s=math.nan, direction_deg=90)
        assert "speed_m_s is null: give a finite number (NaN and infinity arrive as null in JSON)" in nan, nan
        inf = await refusal(call, "goto", session_id="x", lat=-35.36, lon=math.inf, altitude_m=10)
        assert "lon is null" in inf, inf
        word = await refusal(call, "open_sitl", speedup="fast")
        assert "speedup 'fast'" in word and "valid number" in word, word
        missing = await refusal(call, "takeoff", session_id="x")
        assert "altitude_m is missing" in missing, missing
        for text in (nan, inf, word, missing):
            assert "\n" not in text and "pydantic" not in text and len(text) < 300, text
        # the server goes on serving
        assert (await call("list_sessions")) is not None
