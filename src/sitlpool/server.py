"""The MCP server: one per agent (``sitlpool serve``), stdio by default, streamable HTTP
on loopback on request. Thin: every tool parses, calls ``Sessions``, formats."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import sys
import threading
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from . import stdio_wire
from .errors import SitlpoolError
from .sessions import Sessions

log = logging.getLogger("sitlpool.server")

RO = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
ACT = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
IDEM = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)


def build(sessions: Sessions) -> MCPServer:
    mcp = MCPServer(stdio_wire.NAME, instructions=stdio_wire.INSTRUCTIONS, version=stdio_wire.version())

    def after_start(fn, a, kw):
        sessions.wait_started()  # orphans are reaped (in the background) before any tool acts
        return fn(*a, **kw)

    async def call(fn, *a, **kw):
        try:
            return await anyio.to_thread.run_sync(after_start, fn, a, kw)
        except (SitlpoolError, ValueError, KeyError) as e:
            # a bare KeyError's str() is the repr of its message; our errors' str() is the message
            msg = e.args[0] if type(e) is KeyError and e.args else str(e)
            raise ToolError(str(msg)) from None

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
        return await call(sessions.list_instances, all)

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
        model: str = "quad",
        instance: int | None = None,
        label: str | None = None,
        speedup: float = 1,
        home: str | None = None,
        params: dict[str, float] | None = None,
        wipe: bool = True,
        wait_s: float = 0,
    ) -> dict:
        """Launch a SITL on a leased instance (the configured binary or the built-in vehicle) and connect to it.
        model: quad (default), hexa, ... or plane (real ArduPlane beside the configured ArduCopter; the built-in vehicle is a copter only).
        home: "lat,lon,alt_m,heading_deg"."""
        return (await call(sessions.open, model, instance, label, speedup, home, params, wipe, wait_s)).info()

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

    @mcp.tool(annotations=RO)
    async def snapshot(session_id: str) -> dict:
        """Mode, armed, position, altitude, speeds, heading, battery, GPS, status, heartbeat age, recent texts, process state."""
        return await call(sessions.snapshot, session_id)

    @mcp.tool(annotations=ACT)
    async def arm(session_id: str, wait_ready_s: float = 20) -> dict:
        """Arm the motors: waits up to wait_ready_s for the vehicle to be ready to arm, then asks; a refusal says
        what the vehicle answered (or sitlpool's diagnosis). Retry while refused."""
        return await call(sessions.fly, session_id, "arm", wait_ready_s=wait_ready_s)

    @mcp.tool(annotations=ACT)
    async def disarm(session_id: str, force: bool = False) -> dict:
        """Disarm (force=True disarms even in the air: the vehicle falls)."""
        return await call(sessions.fly, session_id, "disarm", force=force)

    @mcp.tool(annotations=IDEM)
    async def set_mode(session_id: str, mode: str) -> dict:
        """Change flight mode: copter GUIDED, LOITER, ALT_HOLD, STABILIZE, RTL, LAND, BRAKE, AUTO, ...;
        plane MANUAL, FBWA, TAKEOFF, LOITER (circles), GUIDED, RTL, AUTO, ... (snapshot's vehicle.kind says which)."""
        return await call(sessions.fly, session_id, "set_mode", mode=mode)

    @mcp.tool(annotations=ACT)
    async def takeoff(session_id: str, altitude_m: float) -> dict:
        """Take off to altitude_m above home. Copter: GUIDED (set for you if needed), armed first (re-armed if it
        disarmed itself on the ground). Plane: TAKEOFF mode with TKOFF_ALT, armed for you."""
        return await call(sessions.fly, session_id, "takeoff", altitude_m=altitude_m)

    @mcp.tool(annotations=ACT)
    async def goto(session_id: str, lat: float, lon: float, altitude_m: float) -> dict:
        """Fly to lat/lon at altitude_m above home (copter: GUIDED, flying; plane: circles the point)."""
        return await call(sessions.fly, session_id, "goto", lat=lat, lon=lon, altitude_m=altitude_m)

    @mcp.tool(annotations=ACT)
    async def land(session_id: str) -> dict:
        """Land where the vehicle is (copter; a plane cannot: use rtl)."""
        return await call(sessions.fly, session_id, "land")

    @mcp.tool(annotations=ACT)
    async def rtl(session_id: str) -> dict:
        """Return to launch and land."""
        return await call(sessions.fly, session_id, "rtl")

    @mcp.tool(annotations=RO)
    async def wait_until(
        session_id: str, condition: str, value: str | float | None = None, timeout_s: float = 30
    ) -> dict:
        """Wait (at most 55 s) for ready_to_arm, altitude_above/altitude_below (m), armed, disarmed, mode (name),
        reached (radius m of the last goto), landed, text, mission_item (N), mission_done. Returns met, timeout, died or closed."""
        return await call(sessions.wait_until, session_id, condition, value, timeout_s)

    @mcp.tool(annotations=RO)
    async def get_param(session_id: str, name: str) -> dict:
        """Read a vehicle parameter."""
        s = await call(sessions.get, session_id)
        return {"name": name.upper(), "value": await call(s.link.get_param, name)}

    @mcp.tool(annotations=IDEM)
    async def set_param(session_id: str, name: str, value: float) -> dict:
        """Set a vehicle parameter (refused on a read-only attachment, or when not a finite number)."""
        s = await call(sessions.get, session_id)
        return {"name": name.upper(), "value": await call(s.link.set_param, name, value)}

    try:  # issue 14's tools register themselves; skipped until that module exists
        from . import toolkit
    except ImportError as e:
        if e.name != f"{__package__}.toolkit":
            raise
    else:
        toolkit.register(mcp, sessions, call)
    return mcp


async def run_on_wire(mcp: MCPServer, wire: stdio_wire.Wire) -> None:
    """``MCPServer.run_stdio_async`` on streams we give it (the SDK has no public form of this)."""
    from mcp.server.stdio import stdio_server

    stdin, stdout = wire.streams()
    async with stdio_server(stdin, stdout) as (read_stream, write_stream):
        low = mcp._lowlevel_server
        await low.run(read_stream, write_stream, low.create_initialization_options())


def check_loopback(host: str) -> None:
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SitlpoolError(
            f"refusing to serve MCP over HTTP on {host}: sitlpool binds loopback only "
            "(127.0.0.1 or ::1); tunnel it if you need it elsewhere"
        )


def serve(
    http_port: int | None = None,
    host: str = "127.0.0.1",
    settings=None,
    ray: str | None = None,
    wire: stdio_wire.Wire | None = None,
) -> int:
    """Serve one agent: over ``wire`` (stdio claimed by ``stdio_wire.serve``, which may have
    answered ``initialize`` already), the process's own stdio, or streamable HTTP."""
    if http_port is not None:
        check_loopback(host)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="sitlpool %(levelname)s %(name)s: %(message)s")
    if ray:
        from .fleet.serve import ray_sessions  # open_sitl placed on the cluster; every tool unchanged

        sessions = ray_sessions(ray, settings)
    else:
        sessions = Sessions(settings)
    sessions.start(background=True)  # answer initialize at once; tools wait for the reaping
    mcp = build(sessions)
    stop = threading.Event()

    def idle_reaper():
        while not stop.wait(min(30.0, sessions.settings.idle_timeout_s / 4)):
            sessions.close_idle()

    threading.Thread(target=idle_reaper, daemon=True, name="idle sessions").start()

    got_signal: list[int] = []

    def on_signal(signum, _frame):
        got_signal.append(signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if wire is not None:
            anyio.run(run_on_wire, mcp, wire)
        elif http_port is None:
            anyio.run(mcp.run_stdio_async)
        else:
            anyio.run(lambda: mcp.run_streamable_http_async(host=host, port=http_port))
    except SystemExit:
        pass
    finally:
        stop.set()
        sessions.close_all()
        if got_signal:
            # the stdio reader thread is blocked on a stdin nobody closes: leave without waiting for it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + got_signal[0])
    return 0
