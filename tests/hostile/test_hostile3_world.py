"""Hostile pass 3 on the world tools: a failure injected through an attachment (a SITL someone
else runs) must not outlive the session that injected it. After close_sitl the vehicle stays
(it is not ours); a failure left on it could no longer be undone by clear_failure, whose record
of what it set and of the values before lived in the closed session's link."""

from __future__ import annotations

import pytest

from conftest import Gcs, listening, start_sim, wait_for
from mcp_client import ToolFailed, server
from sitlpool.instances import ports

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_failures_injected_through_an_attachment_are_undone_when_it_closes(env, procs, tmp_path, instances):
    n = instances[0]
    start_sim(procs, tmp_path / "theirs", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)  # the SITL's owner, connected first
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial1), what="SERIAL1")
    try:
        async with server(env) as call:
            sid = (await call("attach_sitl", instance=n, control=True))["session_id"]
            await call("inject_failure", session_id=sid, kind="gps_loss")
            await call("inject_failure", session_id=sid, kind="rc_loss")
            closed = await call("close_sitl", session_id=sid)
            assert closed["state"] == "closed"
            again = (await call("attach_sitl", instance=n, control=True))["session_id"]
            left = {
                name: (await call("get_param", session_id=again, name=name))["value"]
                for name in ("SIM_GPS1_ENABLE", "SIM_RC_FAIL")
            }
            cleared = True
            try:
                await call("clear_failure", session_id=again, kind="gps_loss")
            except ToolFailed:
                cleared = False
            await call("set_params", session_id=again, values={"SIM_GPS1_ENABLE": 1, "SIM_RC_FAIL": 0})
            await call("close_sitl", session_id=again)
    finally:
        owner.close()
    assert left == {"SIM_GPS1_ENABLE": 1, "SIM_RC_FAIL": 0}, (
        f"close_sitl detached and left its injected failures on a vehicle it does not own: {left}; "
        f"clear_failure from a new attachment {'worked' if cleared else 'refused (no record of them)'}"
    )


async def test_injecting_a_kind_again_says_it_replaces_the_first(env, instances):
    """motor 2 at half thrust, then motor 3: the second inject_failure silently sets
    SIM_ENGINE_FAIL to motor 3 alone, so motor 2 is healthy again while the answer only says
    "injected: motor" (sitlpool does the same on ArduCopter 4.7, measured). Either refuse ("motor is injected:
    motor 2 at 0.5; clear_failure first") or say what was replaced; never undo half silently."""
    async with server(env) as call:
        sid = (await call("open_sitl", speedup=5))["session_id"]
        await call("inject_failure", session_id=sid, kind="motor", motor=2, thrust=0.5)
        try:
            second = await call("inject_failure", session_id=sid, kind="motor", motor=3, thrust=0.2)
        except ToolFailed as e:
            second = {"refused": str(e)}
        fail = (await call("get_param", session_id=sid, name="SIM_ENGINE_FAIL"))["value"]
        await call("close_sitl", session_id=sid)
    if "refused" in second:
        assert "motor" in second["refused"] and "clear_failure" in second["refused"], second
        assert fail == 2, "refused, yet the first failure was changed"
    else:
        assert "replaced" in second and second["replaced"].get("SIM_ENGINE_FAIL") == 2, (
            f"the second motor failure undid the first (SIM_ENGINE_FAIL now {fail}) without saying so: {second}"
        )
