"""Lua scripts in step programs on real ArduCopter, through the MCP server: ``fly_steps`` from a
preset that names a script (SITLPOOL_SCRIPTS_DIR) runs it (the script's parameter is read back
by a step), the run's recipe records the script by name and SHA-256, and ``repro`` flies it
again with the same script (``same_scripts``)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import anyio
import pytest

from mcp_client import server

LUA = 'param:set("SCR_USER1", 4242)\n'
PRESETS = """
[lua-hop]
description = "real ArduCopter with a Lua script, 10x"
speedup = 10
scripts = ["setter.lua"]
"""
PROGRAM = [{"hold_s": 5}, {"tool": "get_param", "name": "SCR_USER1"}]


@pytest.fixture
def lua_env(env, real_copter, tmp_path):
    (tmp_path / "lua").mkdir()
    (tmp_path / "lua" / "setter.lua").write_text(LUA)
    (tmp_path / "presets.toml").write_text(PRESETS)
    return dict(
        env,
        SITLPOOL_SITL_BINARY=str(real_copter),
        SITLPOOL_SCRIPTS_DIR=str(tmp_path / "lua"),
        SITLPOOL_PRESETS=str(tmp_path / "presets.toml"),
    )


async def finished(call, run_id: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = await call("steps_status", run_id=run_id)
        if st["done"]:
            return st
        await anyio.sleep(0.5)
    raise AssertionError(f"step run {run_id} did not finish: {st}")


def test_a_presets_lua_script_runs_is_recorded_and_flies_again(lua_env):
    async def agent():
        async with server(lua_env) as call:
            first = await finished(call, (await call("fly_steps", steps=PROGRAM, preset="lua-hop"))["run_id"])
            again = await finished(call, (await call("repro", run_id=first["run_id"]))["run_id"])
            return first, again

    first, again = anyio.run(agent)
    assert first["ok"], first["error"]
    assert first["outcomes"][1]["result"]["value"] == 4242, first["outcomes"][1]  # the script ran
    recipe = json.loads(Path(first["recipe"]).read_text())
    assert recipe["scripts"] == [{"name": "setter.lua", "sha256": hashlib.sha256(LUA.encode()).hexdigest()}]
    assert recipe["speedup"] == 10 and not recipe["binary"]["builtin"], recipe["binary"]
    assert again["ok"], again["error"]
    assert again["outcomes"][1]["result"]["value"] == 4242, again["outcomes"][1]
    assert again["comparison"]["same_scripts"] is True, again["comparison"]
