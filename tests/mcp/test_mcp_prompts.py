"""The MCP prompts (whole jobs as recipes of sitlpool's own tools, in the order real ArduCopter
needs them) and list_presets, through the real MCP client over stdio."""

import re

import pytest

from mcp_client import ToolFailed, server
from sitlpool.server.prompts import PROMPTS

pytestmark = pytest.mark.anyio
NAMES = {"preflight", "hop", "mission", "failsafe_test", "postmortem", "ab_test"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _text(result) -> str:
    return "\n".join(m.content.text for m in result.messages)


def _order(text: str, *needles: str) -> None:
    at = [text.find(n) for n in needles]
    assert -1 not in at and at == sorted(at), dict(zip(needles, at, strict=True))


async def test_the_prompts_are_listed_and_fill_their_arguments(env):
    async with server(env) as call:
        listed = {p.name: p for p in (await call.session.list_prompts()).prompts}
        assert set(listed) == NAMES
        assert all(p.description for p in listed.values())
        assert {a.name for a in listed["hop"].arguments} == {"preset", "altitude_m", "hold_s"}
        hop = _text(await call.session.get_prompt("hop", {"preset": "windy-cmac", "altitude_m": "15"}))
        assert 'open_sitl(preset="windy-cmac")' in hop and "takeoff(altitude_m=15)" in hop
        # real ArduCopter's order: ready before GUIDED, GUIDED before arming, arming before takeoff
        _order(
            hop, "ready_to_arm", 'mode="GUIDED"', "arm(session_id)", "takeoff(", "land()", "close_sitl", "log_summary"
        )
        fs = _text(await call.session.get_prompt("failsafe_test", {"kind": "gcs_loss"}))
        _order(
            fs,
            "ready_to_arm",
            "takeoff(",
            "list_failures",
            'inject_failure(session_id, kind="gcs_loss")',
            'condition="failsafe"',
        )
        m = _text(await call.session.get_prompt("mission", {}))
        _order(m, "upload_mission", "ready_to_arm", "start_mission", "mission_done", "log_summary")
        pm = _text(await call.session.get_prompt("postmortem", {"log_id": "abc123"}))
        assert 'log_id "abc123"' in pm and "log_messages" in pm
        ab = _text(await call.session.get_prompt("ab_test", {"param": "ATC_RAT_RLL_P", "value_a": "0.1"}))
        assert '"A": {"params": {"ATC_RAT_RLL_P": 0.1}}' in ab and "batch_compare" in ab


async def test_every_tool_a_prompt_names_exists(env):
    async with server(env) as call:
        tools = {t.name for t in (await call.session.list_tools()).tools}
    for fn in PROMPTS:
        named = set(re.findall(r"\b([a-z_]+)\(", fn())) - {"fly_steps"}  # fly_steps' format, named in prose
        unknown = {n for n in named if n not in tools}
        assert not unknown, f"prompt {fn.__name__} names no such tool: {unknown}"


async def test_list_presets(env, data_dir, tmp_path):
    (tmp_path / "f.parm").write_text("RTL_ALT 1500\n")
    (data_dir / "presets.toml").write_text(
        f'[cmac-fast]\ndescription = "fast"\nhome = "CMAC"\nspeedup = 10\nparam_files = ["{tmp_path / "f.parm"}"]\n'
    )
    async with server(env) as call:
        got = await call("list_presets")
        assert got["file"] == str(data_dir / "presets.toml")
        assert got["presets"] == [
            {
                "name": "cmac-fast",
                "description": "fast",
                "source": str(data_dir / "presets.toml"),
                "home": "CMAC",
                "speedup": 10,
                "param_files": [str(tmp_path / "f.parm")],
            }
        ]
        assert "CMAC" in got["homes"]
        (data_dir / "presets.toml").write_text("[broken\n")
        with pytest.raises(ToolFailed, match="presets file .* is not TOML"):
            await call("list_presets")


async def test_open_sitl_from_a_preset(env, data_dir, tmp_path, vehicle_binary):
    """On the built-in vehicle and on real ArduCopter: the preset under the arguments given,
    the configuration read back, and bad names refused with what exists."""
    if vehicle_binary is not None:
        env = {**env, "SITLPOOL_SITL_BINARY": str(vehicle_binary)}
    (tmp_path / "f.parm").write_text("RTL_ALT 1800\n")
    (data_dir / "presets.toml").write_text(
        f'[cmac-fast]\nhome = "CMAC_South"\nspeedup = 10\nparam_files = ["{tmp_path / "f.parm"}"]\n'
        "params = { WPNAV_SPEED = 700 }\n"
    )
    async with server(env) as call:
        s = await call("open_sitl", preset="cmac-fast", params={"LAND_SPEED": 45})
        assert s["config"]["params"] == {"RTL_ALT": 1800, "WPNAV_SPEED": 700, "LAND_SPEED": 45}
        assert s["config"]["home"] == "-35.363261,149.16523,584,173" and s["config"]["speedup"] == 10
        with pytest.raises(ToolFailed, match="unknown preset 'cmac': did you mean cmac-fast"):
            await call("open_sitl", preset="cmac")
        with pytest.raises(ToolFailed, match=r"unknown parameter RTL_ALTT \(params; did you mean RTL_ALT"):
            await call("open_sitl", params={"RTL_ALTT": 5}, speedup=5)
        leased = [x["instance"] for x in (await call("list_instances"))["leased"]]
        assert leased == [s["instance"]], "nothing left of the failed launches"
        await call("close_sitl", session_id=s["session_id"])
