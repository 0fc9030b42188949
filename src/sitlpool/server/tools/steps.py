"""Tools for step programs (``sitlpool.steps``): fly_steps, steps_status, abort_steps, repro.
A step is a flight tool's name and arguments (``{"tool": "takeoff", "altitude_m": 10}``) or
``{"hold_s": N}``; the steps run inside the server on a session of their own, timed on the
vehicle's clock, so a program's result does not depend on the caller's thinking time."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from ...sessions import Sessions
from ...steps import runs_for
from ...steps.runs import with_preset
from .common import ACT, DESTRUCTIVE, RO, Call
from .sessions import agent_param_files


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    runs = runs_for(sessions)

    @mcp.tool(annotations=ACT)
    async def fly_steps(
        steps: list[dict[str, Any]],
        label: str | None = None,
        time_limit_s: float = 600,
        model: str | None = None,
        speedup: float | None = None,
        home: str | None = None,
        params: dict[str, float] | None = None,
        wind: dict[str, Any] | None = None,
        instance: int | None = None,
        wait_s: float | None = None,
        preset: str | None = None,
        param_files: list[str] | None = None,
        scripts: list[str] | None = None,
    ) -> dict:
        """Run a step program on a new SITL (open_sitl's options) and return at once with its run_id. A step is a
        flight tool and its arguments without session_id, e.g. {"tool": "takeoff", "altitude_m": 10},
        {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60}, {"tool":
        "set_params", "values": {...}}, or {"hold_s": 5}. hold_s, wait_until's timeout_s and time_limit_s are SIM
        seconds (the vehicle's clock). The run stops at the first step that fails; the SITL is then stopped, its logs
        kept and a recipe written (repro flies it again). preset, param_files (names beside the presets file) and
        scripts (Lua, real SITL, by name in SITLPOOL_SCRIPTS_DIR) as open_sitl's. Follow with steps_status(run_id)."""
        files = agent_param_files(sessions.settings, param_files)

        def start():
            given = dict(
                model=model,
                instance=instance,
                label=label,
                speedup=speedup,
                home=home,
                params=params,
                wait_s=wait_s,
                param_files=files,
                scripts=scripts,
            )
            o = with_preset(preset, sessions.settings, given)  # as open_sitl's options
            run = runs.start(steps, time_limit_s=time_limit_s, wind=wind, **o)
            return {"run_id": run.id, "session_id": run.session.id, "steps": len(steps)}

        return await call(start)

    @mcp.tool(annotations=RO)
    async def steps_status(run_id: str) -> dict:
        """A step run's progress: state (running, closing, done, failed, aborted), steps done of total, the current step,
        each step's outcome with its sim times, the vehicle's sim time, ok, and once its session is closed the log
        ids and recipe; a repro run's comparison with the original (log summaries, positions, exact or not)."""
        return await call(runs.status, run_id)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def abort_steps(run_id: str) -> dict:
        """Stop a step run: its steps end and its session is closed (SITL stopped, logs kept)."""
        return await call(runs.abort, run_id)

    @mcp.tool(annotations=ACT)
    async def repro(
        run_id: str | None = None,
        log_id: str | None = None,
        session_id: str | None = None,
        recipe: dict[str, Any] | None = None,
        speedup: float | None = None,
    ) -> dict:
        """Fly a recorded run again (one of run_id, log_id, session_id, or a recipe) as a new run; returns its run_id
        at once. session_id may be a fly_steps run's or any closed session of this server (opened with open_sitl and
        flown with the flight tools: its calls fly again as steps at the sim times they were made). When it is done,
        steps_status(run_id) carries the comparison of the two logs and positions (exact: no log difference and
        every held position the same to the centimetre)."""

        def start():
            run = runs.repro(run_id=run_id, log_id=log_id, session_id=session_id, recipe=recipe, speedup=speedup)
            return {"run_id": run.id, "session_id": run.session.id, "repro_of": run.result.repro_of}

        return await call(start)
