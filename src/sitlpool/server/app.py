"""The MCP server: one per agent (``sitlpool serve``), over the stdio wire by default,
streamable HTTP on loopback with a bearer token on request. Thin: every tool parses, calls
the session registry or a session, formats (``tools``)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp_types import ListToolsResult
from pydantic import ValidationError

from ..errors import SitlpoolError
from ..sessions import Sessions
from . import http, prompts, toolcache
from .early import INSTRUCTIONS, NAME, version
from .tools import register_all

log = logging.getLogger("sitlpool.server")


def argument_errors(tool: str, exc: ValidationError) -> str:
    """The SDK's multi-line argument validation error as one line naming each argument, what
    it got and what it takes. A null where a number is due is what NaN and infinity become in
    JSON (the Python MCP client sends them so): said as such."""
    parts = []
    for e in exc.errors(include_url=False):
        name = ".".join(str(x) for x in e.get("loc", ())) or "arguments"
        given = e.get("input")
        if given is None and e.get("type") in ("float_type", "int_type", "float_parsing", "int_parsing"):
            parts.append(f"{name} is null: give a finite number (NaN and infinity arrive as null in JSON)")
        elif e.get("type") == "missing":
            parts.append(f"{name} is missing")
        else:
            shown = repr(given)
            parts.append(f"{name} {shown[:60]}{'...' if len(shown) > 60 else ''}: {e.get('msg', 'invalid')}")
    return f"{tool}: " + "; ".join(parts)


class Server(MCPServer):
    """The SDK's server, its argument validation errors said in one line (``argument_errors``)."""

    async def call_tool(self, name, arguments, context=None):  # type: ignore[no-untyped-def]
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(argument_errors(name, e.__cause__)) from None
            raise


def build(sessions: Sessions) -> MCPServer:
    mcp = Server(NAME, instructions=INSTRUCTIONS, version=version())

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

    register_all(mcp, sessions, call)
    prompts.register(mcp)  # whole jobs as recipes: preflight, hop, mission, failsafe_test, postmortem, ab_test
    return mcp


async def tool_list(mcp: MCPServer) -> list[dict[str, Any]]:
    """The ``tools`` of the SDK's ``tools/list`` answer, as it puts them on the wire."""
    result = ListToolsResult(tools=await mcp.list_tools())
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)["tools"]


def cache_tool_list(mcp: MCPServer) -> None:
    """Store this server's tool list for the stdio wire's early ``tools/list`` answer."""
    try:
        toolcache.store(toolcache.key(version()), anyio.run(tool_list, mcp))
    except Exception:  # only the next start's speed depends on it: never this server's life
        log.exception("could not render the MCP tool list for the cache")


async def run_on_wire(mcp: MCPServer, wire: Any) -> None:  # wire: a server.wire.Wire
    """``MCPServer.run_stdio_async`` on streams we give it (the SDK has no public form of this)."""
    stdin, stdout = wire.streams()
    async with stdio_server(stdin, stdout) as (read_stream, write_stream):
        low = mcp._lowlevel_server
        await low.run(read_stream, write_stream, low.create_initialization_options())


def serve(
    http_port: int | None = None,
    host: str = "127.0.0.1",
    settings=None,
    ray: str | None = None,
    wire: Any = None,  # a server.wire.Wire (not imported: the wire imports this module)
) -> int:
    """Serve one agent: over ``wire`` (stdio claimed by ``wire.serve``, which may have
    answered ``initialize`` and ``tools/list`` already), the process's own stdio, or
    streamable HTTP with a bearer token (``http``)."""
    if http_port is not None:
        http.check_loopback(host)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="sitlpool %(levelname)s %(name)s: %(message)s")
    sessions: Sessions
    if ray:
        from ..fleet.serve import ray_sessions  # Ray (an optional dependency, seconds to import) only for --ray

        sessions = ray_sessions(ray, settings)
    else:
        sessions = Sessions(settings)
    token = sock = None
    if http_port is not None:
        sock = http.bind(host, http_port)  # a port in use is refused before anything else is done
        token = http.Token.create(sessions.settings.data_dir, sock.getsockname()[1])
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
        cache_tool_list(mcp)  # for the next stdio start's early tools/list
        if wire is not None:
            anyio.run(run_on_wire, mcp, wire)
        elif sock is None or token is None:
            anyio.run(mcp.run_stdio_async)
        else:
            anyio.run(http.run, mcp, host, sock, token)
    except SystemExit:
        pass
    finally:
        stop.set()
        sessions.close_all()
        if token is not None:
            token.remove()
        if got_signal:
            # the stdio reader thread is blocked on a stdin nobody closes: leave without waiting for it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + got_signal[0])
    return 0
