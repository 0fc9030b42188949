"""Tools for the server, the pool and sessions: server_info, list_instances, lease_instance,
release_instance, kill_instance, open_sitl, attach_sitl, close_sitl, list_sessions."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ... import presets
from ...sessions import Sessions
from ...status import instances_document
from . import world as world_tools
from .common import ACT, DESTRUCTIVE, IDEM, RO, Call


def instances_seen_by(sessions: Sessions, all_: bool = False) -> dict:
    """``status.instances_document`` seen from this server's sessions and leases."""
    mine = {s.handle.instance: s.id for s in sessions.open_sessions() if s.kind == "managed"}
    return instances_document(sessions.settings, sessions.pool, all_, sessions=mine, leases=sessions.leases)


def agent_param_files(settings, files: list[str] | None) -> list[str] | None:
    """An agent's parameter files: names of files beside the presets file (an agent never names
    an arbitrary path on this machine, whose lines a parse error would quote), unless
    SITLPOOL_ALLOW_PATHS=1."""
    if not files or settings.allow_paths:
        return files
    base = presets.presets_file(settings).parent.resolve()
    out = []
    for f in [files] if isinstance(files, str) else files:
        p = None if "\0" in str(f) else (base / str(f)).resolve()
        if p is None or Path(str(f)).is_absolute() or base not in p.parents:
            raise ToolError(
                f"param_files: {f!r} is not a file name in {base}; put the file beside the presets file "
                "(or set SITLPOOL_ALLOW_PATHS=1 to let agents name any path)"
            )
        out.append(str(p))
    return out


def pace_remote_sessions(mcp: MCPServer, pacer) -> None:
    """Around every tool call, ``pacer.begin()`` / ``end()`` (``RaySessions.remote_pacer``: the
    paced vehicles on Ray nodes run at their speedup only during calls), as
    ``world_tools.wrap_calls_with_pacing`` does for this machine's vehicles."""
    inner = mcp.call_tool

    async def call_tool(name: str, arguments: dict[str, Any], context=None):
        paced = pacer.pacing
        if paced:
            await anyio.to_thread.run_sync(pacer.begin)  # waits (briefly) for the nodes to speed up
        try:
            return await inner(name, arguments, context)
        finally:
            if paced:
                await anyio.to_thread.run_sync(pacer.end)

    setattr(mcp, "call_tool", call_tool)  # noqa: B010  (the instance attribute shadows the method)


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    remote_pacer = getattr(sessions, "remote_pacer", None)  # serve --ray: RaySessions
    if remote_pacer is not None:
        pace_remote_sessions(mcp, remote_pacer)

    @mcp.tool(annotations=RO)
    async def server_info() -> dict:
        """This server: its id, pool, lock dir, sessions, and what it reaped at start."""
        s = sessions
        await call(s.wait_started)
        return {
            "server_id": s.server_id,
            "pid": os.getpid(),
            "pool": list(s.pool.pool),
            "lock_dir": str(s.pool.lock_dir),
            "data_dir": str(s.settings.data_dir),
            "sitl_binary": str(s.settings.sitl_binary or "built-in vehicle"),
            "sessions": len(s.open_sessions()),
            "reaped_at_start": [r.as_dict() for r in s.reaped],
            "uptime_s": round(time.time() - s.started, 1),
        }

    @mcp.tool(annotations=RO)
    async def list_instances(all: bool = False) -> dict:
        """Every leased instance (any process, any lock file), SITLs running without a lease, and with all=True the free pool instances."""
        return await call(instances_seen_by, sessions, all)

    @mcp.tool(annotations=ACT)
    async def lease_instance(owner: str, instance: int | None = None, wait_s: float = 0) -> dict:
        """Reserve an instance for something you launch yourself (held until release_instance or this server exits)."""
        lease = await call(sessions.lease, owner, instance, wait_s)
        return {"instance": lease.instance, "owner": lease.owner, "ports": lease.ports.as_dict()}

    @mcp.tool(annotations=IDEM)
    async def release_instance(instance: int) -> dict:
        """Release an instance leased with lease_instance."""
        await call(sessions.release, instance)
        return {"released": instance}

    @mcp.tool(annotations=DESTRUCTIVE)
    async def kill_instance(instance: int, force: bool = False) -> dict:
        """Kill a stray SITL on an instance nobody holds (refused, naming the holder, if someone does)."""
        return (await call(sessions.kill_instance, instance, force)).as_dict()

    @mcp.tool(annotations=ACT)
    async def open_sitl(
        model: str | None = None,
        instance: int | None = None,
        label: str | None = None,
        speedup: float | None = None,
        home: str | None = None,
        params: dict[str, float] | None = None,
        wipe: bool | None = None,
        wait_s: float | None = None,
        wind: dict[str, Any] | None = None,
        pace: bool = False,
        preset: str | None = None,
        param_files: list[str] | None = None,
        scripts: list[str] | None = None,
        watch: list[str] | None = None,
        tlog: bool = False,
    ) -> dict:
        """Launch a SITL on a leased instance (the configured binary or the built-in vehicle) and connect to it.
        model: quad (default), hexa, ... or plane (real ArduPlane beside the configured ArduCopter; the built-in vehicle is a copter only).
        home: a named home (CMAC; list_presets lists them) or "lat,lon,alt_m,heading_deg". wind: {"speed_m_s", "direction_deg", "turbulence", "profile"} as set_wind,
        from boot. pace=True: the vehicle nearly stops between tool calls and runs at `speedup` during them.
        preset: a name of list_presets (the arguments given win over its values). param_files: parameter files
        applied at boot after the tree's defaults; params after them. scripts: Lua scripts (real SITL) by name in
        SITLPOOL_SCRIPTS_DIR. The answer's `config` is the configuration the vehicle really got (read back).
        watch: ["udp:127.0.0.1:14550", "tcpin:127.0.0.1:5790"]: ground stations (QGroundControl, MAVProxy) watch
        read-only through this session's link; loopback only. tlog=True: record the link's telemetry (.tlog), kept
        with the flight's logs."""
        param_files = agent_param_files(sessions.settings, param_files)
        o = await call(
            presets.open_options,
            preset,
            sessions.settings,
            model=model,
            instance=instance,
            label=label,
            speedup=speedup,
            home=home,
            params=params,
            wipe=wipe,
            wait_s=wait_s,
            param_files=param_files,
            scripts=scripts,
        )
        wind_values, o["params"] = await call(world_tools.open_params, wind, o["params"])
        s = await call(lambda: sessions.open(**o, watch=watch, tlog=tlog))
        remote = remote_pacer is not None and remote_pacer.accepts(s)  # a Ray node's vehicle: paced there
        info = await call(world_tools.after_open, sessions, s.info(), wind_values, pace and not remote, o["speedup"])
        if pace and remote and remote_pacer is not None:
            try:
                info["pace"] = await call(remote_pacer.add, s, o["speedup"])
            except BaseException:  # nothing left behind: the session just opened is closed again
                await call(sessions.close, s.id)
                raise
        return info

    @mcp.tool(annotations=ACT)
    async def attach_sitl(
        instance: int | None = None,
        endpoint: str | None = None,
        label: str | None = None,
        control: bool = False,
        force: bool = False,
    ) -> dict:
        """Attach to a SITL someone else runs (by instance or tcp:HOST:PORT); read-only unless control=True.
        control=True on an instance another holder leases is refused, naming the holder; force=True overrides (logged)."""
        if (instance is None) == (endpoint is None):
            raise ToolError(
                "attach_sitl needs exactly one of instance or endpoint (e.g. endpoint='tcp:127.0.0.1:5762')"
            )
        return (await call(sessions.attach, instance, endpoint, label, control, force)).info()

    @mcp.tool(annotations=DESTRUCTIVE)
    async def close_sitl(session_id: str) -> dict:
        """Close a session: a launched SITL is stopped and its lease released; an attached one is only detached."""
        return await call(sessions.close, session_id)

    @mcp.tool(annotations=RO)
    async def list_sessions() -> list[dict]:
        """This server's sessions."""
        return [s.info() for s in sessions.open_sessions()]
