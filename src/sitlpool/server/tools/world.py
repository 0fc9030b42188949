"""Tools for the world the vehicle flies in: set_wind, wind_history, inject_failure,
clear_failure, list_failures, set_speedup; and ``open_sitl``'s ``wind`` and ``pace`` options.

Pacing: ``open_sitl(pace=True)`` slows the vehicle to ``world.PACE_SPEEDUP`` while no tool
call runs and restores its speedup while one does. Every tool call passes through the
server's ``call_tool``, which ``register`` wraps once (the one place that sees whole tool
calls: ``call`` runs once per blocking step, several times in some tools)."""

from __future__ import annotations

import os
import weakref
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from ... import world
from ...errors import SessionError
from ...mavlink.link import VehicleLink
from ...sessions import Sessions
from .common import IDEM, RO, Call, live_link

_pacers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def pacer_for(sessions: Sessions) -> world.Pacer:
    p = _pacers.get(sessions)
    if p is None:
        p = _pacers[sessions] = world.Pacer()
    return p


def world_link(sessions: Sessions, session_id: str):
    """The live link of a session, for the world's functions. A Ray node's vehicle
    (``serve --ray``) answers them on its node (``world.elsewhere``): its link gets no flight
    recorder here, whose listener would have to run there."""
    s = sessions.get(session_id)
    if s.link is not None and world.elsewhere(s.link) is not None:
        if s.handle.dead:
            raise SessionError(f"session {session_id} is {s.state}; open a new one")
        return s.link
    return live_link(sessions, session_id)


def writable_link(sessions: Sessions, session_id: str, what: str, force: bool = False):
    """The live link of a session that may change its vehicle: not a read-only attachment, and
    not a vehicle on an instance another holder leases unless ``force``."""
    link = world_link(sessions, session_id)
    if world.elsewhere(link) is not None:  # a Ray node's managed vehicle: this server's own
        return link
    if link.read_only:
        raise SessionError(
            f"{what} refused: session {session_id} is attached read-only; attach_sitl with control=True "
            "(and force=True if another holder leases the instance) to change its vehicle"
        )
    link.require_writable(what)
    s = sessions.get(session_id)
    n = getattr(s.handle, "instance", None)
    if s.kind == "unmanaged" and n is not None and not force:
        h = sessions.pool.holder(n)
        if h is not None and h.pid != os.getpid():
            raise SessionError(
                f"{what} refused: instance {n} is leased to {h.describe()}, whose vehicle this is; "
                "ask its holder, or pass force=True if you must"
            )
    return link


def open_params(wind: dict | None, params: dict[str, float] | None) -> tuple[dict | None, dict[str, float] | None]:
    """``open_sitl``'s ``wind`` checked and added to its launch parameters (before anything starts)."""
    if wind is None:
        return None, params
    values = world.wind_option(wind)
    both = dict(params or {})
    clash = sorted(k for k in values if k in {p.upper() for p in both})
    if clash:
        raise SessionError(f"open_sitl: wind and params both set {', '.join(clash)}; give one")
    both.update(values)
    return values, both


def after_open(sessions: Sessions, info: dict, wind: dict | None, pace: bool, speedup: float) -> dict:
    """Record the launch wind, start pacing: the session's answer says both."""
    s = sessions.get(info["session_id"])
    if not isinstance(s.link, VehicleLink):  # a Ray node's vehicle: its link lives on the node
        if pace:  # nothing left behind: the session just opened is closed again
            sessions.close(info["session_id"])
            raise SessionError("pace=True needs a vehicle of this machine; on a Ray cluster use set_speedup")
        if wind is not None:
            if s.link is not None and world.elsewhere(s.link) is not None:
                world.record_open_wind(s.link, wind)  # the first entry of its wind history, on its node
            info["wind"] = wind
        return info
    if s.link is not None:
        w = world.world_of(s.link)  # sim time from the first message
        s.link.wait(lambda _v: w.boot_ms is not None, 5.0)  # a sim time to answer with, before any pacing
        if wind is not None:
            world.record_open_wind(s.link, wind)
            info["wind"] = wind
        if pace:
            pacer_for(sessions).add(s.link, speedup)
            info["pace"] = {
                "between_calls_speedup": world.PACE_SPEEDUP,
                "during_calls_speedup": speedup,
                "note": "the vehicle runs at its speedup only while a tool call runs",
            }
    return info


def wrap_calls_with_pacing(mcp: MCPServer, sessions: Sessions) -> None:
    pacer = pacer_for(sessions)
    inner = mcp.call_tool

    async def call_tool(name: str, arguments: dict[str, Any], context=None):
        if pacer.pacing:
            await anyio.to_thread.run_sync(pacer.begin)  # waits (briefly) for the paced vehicles to speed up
        else:
            pacer.begin()  # nothing paced: only counts the call
        try:
            return await inner(name, arguments, context)
        finally:
            pacer.end()

    # the instance attribute shadows the method: MCPServer's request handler calls self.call_tool
    setattr(mcp, "call_tool", call_tool)  # noqa: B010  (mypy refuses assigning to a method)


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    wrap_calls_with_pacing(mcp, sessions)

    @mcp.tool(annotations=IDEM)
    async def set_wind(
        session_id: str,
        speed_m_s: float,
        direction_deg: float,
        turbulence: float = 0,
        seed: int | None = None,
        profile: str | None = None,
        force: bool = False,
    ) -> dict:
        """Wind through SIM_WIND_*: speed_m_s (0-60) FROM direction_deg (0 = from the north, as SIM_WIND_DIR),
        turbulence (SIM_WIND_TURB m/s), seed (applied where the vehicle takes one). profile: ardupilot (SIM_WIND_T 0:
        sqrt(alt/60 m) of the speed below 60 m, ArduPilot's default), uniform (1), linear (2); omitted: unchanged.
        Says the wind felt at the vehicle's altitude and the sim time. Refused on a read-only attachment and on a
        vehicle another holder leases (force=True overrides)."""

        def run():
            link = writable_link(sessions, session_id, "set_wind", force)
            return world.set_wind(link, speed_m_s, direction_deg, turbulence, seed, profile)

        return await call(run)

    @mcp.tool(annotations=RO)
    async def wind_history(session_id: str) -> dict:
        """Every wind change on this session (set_wind, open_sitl's wind, any PARAM_SET of SIM_WIND_*), with sim time."""
        return await call(lambda: world.wind_history(world_link(sessions, session_id)))

    @mcp.tool(annotations=RO)
    async def list_failures(session_id: str) -> dict:
        """The failure kinds, their options, whether this vehicle has their SIM_* parameters, ArduCopter 4.7's
        measured reaction, and what is injected now."""
        return await call(lambda: world.list_failures(world_link(sessions, session_id)))

    @mcp.tool(annotations=IDEM)
    async def inject_failure(
        session_id: str,
        kind: str,
        motor: int | None = None,
        thrust: float | None = None,
        voltage: float | None = None,
        north_m: float | None = None,
        east_m: float | None = None,
        all: bool | None = None,
        neutral: bool | None = None,
        force: bool = False,
    ) -> dict:
        """Inject a failure through the vehicle's SIM_* parameters: gps_loss, gps_glitch (north_m, east_m), compass
        (all), baro (all), battery_low / battery_critical (voltage; default just below BATT_LOW_VOLT / BATT_CRT_VOLT),
        motor (motor number from 1, thrust fraction 0-1, default 0), rc_loss (neutral), gcs_loss (sitlpool's
        heartbeats stop). Says what it set, the failsafe parameters and ArduCopter's reaction; clear_failure undoes it.
        Refused on a read-only attachment and on a vehicle another holder leases (force=True overrides)."""
        opts = {
            "motor": motor,
            "thrust": thrust,
            "voltage": voltage,
            "north_m": north_m,
            "east_m": east_m,
            "all": all,
            "neutral": neutral,
        }

        def run():
            world.check_kind(kind)
            return world.inject_failure(
                writable_link(sessions, session_id, f"inject_failure {kind}", force), kind, **opts
            )

        return await call(run)

    @mcp.tool(annotations=IDEM)
    async def clear_failure(session_id: str, kind: str, force: bool = False) -> dict:
        """Undo an injected failure: its SIM_* parameters back to their values before it (gcs_loss: heartbeats resume)."""

        def run():
            world.check_kind(kind)
            return world.clear_failure(writable_link(sessions, session_id, f"clear_failure {kind}", force), kind)

        return await call(run)

    @mcp.tool(annotations=IDEM)
    async def set_speedup(session_id: str, speedup: float, force: bool = False) -> dict:
        """Sim seconds per wall second from now on (SIM_SPEEDUP, live; above 0, at most 1000). A paced session
        (open_sitl pace=True) runs at this speedup during tool calls. Refused on a read-only attachment and on a
        vehicle another holder leases (force=True overrides)."""

        def run():
            link = writable_link(sessions, session_id, "set_speedup", force)
            out = world.set_speedup(link, speedup)  # a Ray node's paced vehicle: its node paces it
            pacer = pacer_for(sessions)
            if world.elsewhere(link) is None and pacer.paced_speedup(link) is not None:
                pacer.set_speedup(link, out["speedup"])
                out["paced_between_calls"] = world.PACE_SPEEDUP
            return out

        return await call(run)
