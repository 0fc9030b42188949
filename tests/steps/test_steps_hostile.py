"""Step programs against a careless or hostile agent: a recipe is data the agent hands over
(repro(recipe=...)), so nothing in it makes the server read or run a file. Its parameter
files are their recorded values (a recipe written by fly_steps holds them), never a path
the server opens; its run ids are no paths either."""

from __future__ import annotations

import pytest

from mcp_client import ToolFailed, server

pytestmark = pytest.mark.anyio

SECRET = "TOPSECRET_LINE=hunter2 is not a parameter"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def secret_file(tmp_path):
    p = tmp_path / "private.txt"
    p.write_text(SECRET + "\n")
    return p


@pytest.mark.parametrize("entry", ["path", "dict without values"])
async def test_repro_recipe_never_reads_a_file_the_agent_names(env, secret_file, entry):
    files = [str(secret_file)] if entry == "path" else [{"path": str(secret_file)}]
    recipe = {"steps": [{"hold_s": 1}], "param_files": files}
    async with server(env) as call:
        with pytest.raises(ToolFailed) as e:
            await call("repro", recipe=recipe)
    msg = str(e.value)
    assert "hunter2" not in msg and "TOPSECRET" not in msg, f"repro read a file the agent named: {msg}"
    assert "param_files" in msg


async def test_repro_recipe_param_file_values_are_used_not_their_path(env, secret_file):
    """A recorded parameter file's values fly; its path (which may no longer exist) is not opened."""
    recipe = {
        "steps": [{"hold_s": 0.5}],
        "param_files": [{"path": "/nonexistent/copter.parm", "sha256": "0" * 64, "values": {"WPNAV_SPEED": 700}}],
    }
    async with server(env) as call:
        got = await call("repro", recipe=recipe)
        assert got["run_id"]
        await call("abort_steps", run_id=got["run_id"])


@pytest.mark.parametrize("run_id", ["../../etc", "..", "/etc/passwd", "a/../../b", "x" * 5000])
async def test_steps_status_and_repro_run_ids_are_no_paths(env, run_id):
    async with server(env) as call:
        for tool in ("steps_status", "repro"):
            with pytest.raises(ToolFailed) as e:
                await call(tool, run_id=run_id)
            assert len(str(e.value)) < 400


@pytest.mark.parametrize("values", [{"WPNAV_SPEED": "fast"}, {"WPNAV_SPEED": [1]}, {"WPNAV_SPEED": float("nan")}])
async def test_repro_recipe_param_file_values_that_are_no_numbers_are_one_line(env, values):
    recipe = {"steps": [{"hold_s": 0.5}], "param_files": [{"path": "x.parm", "values": values}]}
    async with server(env) as call:
        with pytest.raises(ToolFailed) as e:
            await call("repro", recipe=recipe)
    assert "WPNAV_SPEED" in str(e.value) and len(str(e.value)) < 300
