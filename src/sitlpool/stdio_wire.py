"""The MCP server's stdio wire, and its answer to ``initialize`` before the MCP SDK is loaded.

Importing the MCP SDK is most of a server's start (0.5 s on an idle machine, 1.5 s on a
busy one: it builds every protocol model at import), and an agent's client waits for the
``initialize`` answer (``server/discover`` in the 2026-07-28 protocol) before anything
else. So ``sitlpool serve`` (stdio) imports the SDK in a thread while this module, which
imports nothing heavy, answers that first request from the same facts the SDK would use.
The SDK then gets the wire with the request replayed; its own answer is compared with ours
(a difference is logged) and not sent twice.

The wire is claimed the way the SDK claims it: fds 0 and 1 are duplicated for the protocol
and pointed at /dev/null and stderr, so a SITL, a child or a stray print never writes into
the JSON-RPC stream.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SitlpoolError

log = logging.getLogger("sitlpool.server")

NAME = "sitlpool"
INSTRUCTIONS = (
    "ArduPilot SITL sessions on leased instances. open_sitl launches a vehicle you own; attach_sitl watches one "
    "someone else runs (read-only unless control=True). Fly with arm/set_mode/takeoff/goto/land/rtl and wait_until; "
    "snapshot says whether the vehicle is ready to arm and why not (wait_until ready_to_arm waits for it); "
    "sitlpool applies the vehicle's rules (copter or plane) for you. close_sitl when done."
)
# what the SDK's MCPServer advertises through initialize, and through server/discover (the
# 2026-07-28 protocol); tests/test_stdio_wire.py fails if the SDK's own answers differ
CAPABILITIES = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}
MODERN_CAPABILITIES = {
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "tools": {"listChanged": True},
}
META = "io.modelcontextprotocol/"


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sitlpool")
    except Exception:  # pragma: no cover - run from a source tree that was never installed
        return ""


def protocol_versions() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The protocol versions the installed SDK negotiates through ``initialize`` and those
    it speaks per request (``server/discover``), newest last, read from
    ``mcp_types/version.py`` without importing the ``mcp_types`` package (whose ``__init__``
    is the slow part). None: not found, answer nothing early."""
    try:
        spec = importlib.util.find_spec("mcp_types")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
        vspec = importlib.util.spec_from_file_location("sitlpool._mcp_protocol_versions", path)
        mod = importlib.util.module_from_spec(vspec)
        vspec.loader.exec_module(mod)
        handshake = tuple(mod.HANDSHAKE_PROTOCOL_VERSIONS)
        modern = tuple(getattr(mod, "MODERN_PROTOCOL_VERSIONS", ()))
        if not handshake or not all(isinstance(v, str) for v in handshake + modern):
            return None
        return handshake, modern
    except Exception:  # pragma: no cover - an SDK laid out differently: the SDK answers, only later
        return None


def initialize_result(params: dict, versions: tuple[str, ...]) -> dict:
    """The ``initialize`` result the SDK gives: the client's protocol version if the SDK
    speaks it, else the newest it negotiates."""
    requested = params.get("protocolVersion")
    return {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": requested if requested in versions else versions[-1],
        "serverInfo": {"name": NAME, "version": version()},
    }


def discover_result(modern: tuple[str, ...]) -> dict:
    """The ``server/discover`` result the SDK gives (2026-07-28 protocol)."""
    return {
        "cacheScope": "private",
        "capabilities": MODERN_CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "supportedVersions": list(modern),
        "ttlMs": 0,
        "_meta": {META + "serverInfo": {"name": NAME, "version": version()}},
    }


def early_answer(line: bytes, versions: tuple[tuple[str, ...], tuple[str, ...]] | None) -> dict | None:
    """The JSON-RPC response to send at once if ``line`` is a well-formed ``initialize`` or
    ``server/discover`` request; None for anything else (the SDK answers it, errors included)."""
    if versions is None:
        return None
    # parse what the SDK will parse: the line decoded as its stdin decodes it (a BOM stays a
    # character; json.loads(bytes) would skip it), and no lone surrogate (the SDK's parser
    # refuses one): else the SDK never answers and would not be known to have
    try:
        msg = json.loads(line.decode("utf-8", errors="replace"))
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except ValueError:  # UnicodeEncodeError included
        return None
    if (
        not isinstance(msg, dict)
        or msg.get("jsonrpc") != "2.0"
        or msg.get("method") not in ("initialize", "server/discover")
    ):
        return None
    rid, params = msg.get("id"), msg.get("params")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or not isinstance(params, dict):
        return None
    handshake, modern = versions
    if msg["method"] == "server/discover":
        meta = params.get("_meta")
        info = meta.get(META + "clientInfo") if isinstance(meta, dict) else None
        if not (
            modern
            and meta.get(META + "protocolVersion") in modern
            and _implementation(info)
            and _capabilities(meta.get(META + "clientCapabilities"))
            and set(params) == {"_meta"}
        ):
            return None  # the SDK's own answer (or error) is the right one
        return {"jsonrpc": "2.0", "id": rid, "result": discover_result(modern)}
    if not (
        isinstance(params.get("protocolVersion"), str)
        and _capabilities(params.get("capabilities"))
        and isinstance(params.get("_meta", {}), dict)
        and _implementation(params.get("clientInfo"))
    ):
        return None  # the SDK's validation error is the right answer
    return {"jsonrpc": "2.0", "id": rid, "result": initialize_result(params, handshake)}


def _implementation(info) -> bool:
    return (
        isinstance(info, dict)
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
        and all(isinstance(info.get(k, ""), str) for k in ("title", "description", "websiteUrl"))
        and isinstance(info.get("icons", []), list)
    )


def _capabilities(caps) -> bool:
    """Client capabilities the SDK accepts: an object of objects (roots, sampling, ...)."""
    return isinstance(caps, dict) and all(isinstance(v, dict) for v in caps.values())


def _claim(fd: int, mode: str, diversion: int) -> io.BufferedIOBase:
    """A private duplicate of ``fd`` for the protocol; ``fd`` itself now points at ``diversion``."""
    import fcntl

    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(diversion, fd)
    os.close(diversion)
    return os.fdopen(private, mode, closefd=False)


@dataclass
class Wire:
    """The claimed stdio: the lines already read (replayed to the SDK) and the early answer."""

    inp: io.BufferedReader
    out: io.BufferedWriter
    replay: list[str] = field(default_factory=list)
    answered: dict | None = None  # the early response, until the SDK's own answer to it is seen
    handed_over: bool = False  # the SDK has the wire

    @classmethod
    def claim(cls) -> Wire:
        inp = _claim(0, "rb", os.open(os.devnull, os.O_RDONLY))
        out = _claim(1, "wb", os.dup(2))
        return cls(inp, out)

    def answer_initialize(self) -> None:
        """Read the client's first message; answer it now if it is ``initialize`` (or its
        2026-07-28 form, ``server/discover``)."""
        line = self.inp.readline()
        if not line:
            return  # the client left before saying anything: the SDK reads the EOF
        self.replay.append(line.decode("utf-8", errors="replace"))
        resp = early_answer(line, protocol_versions())
        if resp is not None:
            self.out.write(json.dumps(resp, separators=(",", ":")).encode() + b"\n")
            self.out.flush()
            self.answered = resp

    # ---- the SDK's side (anyio is loaded by then) ----------------------------------------

    def streams(self):
        """``(stdin, stdout)`` for the SDK's ``stdio_server``."""
        import anyio

        self.handed_over = True
        text_in = anyio.wrap_file(io.TextIOWrapper(self.inp, encoding="utf-8", errors="replace"))
        text_out = anyio.wrap_file(io.TextIOWrapper(self.out, encoding="utf-8"))
        return _Replay(self.replay, text_in), _Filter(self, text_out)

    def seen_sdk_answer(self, line: str) -> bool:
        """True if ``line`` is the SDK's answer to the ``initialize`` already answered (drop it)."""
        if self.answered is None:
            return False
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("id") != self.answered["id"] or "method" in msg:
            return False
        res = msg.get("result")
        if "error" not in msg and not (
            isinstance(res, dict) and ("protocolVersion" in res or "supportedVersions" in res)
        ):
            # the answer to a later request reusing the id: the SDK never answered ours (it could not parse it)
            log.warning("the MCP SDK did not answer the initialize sitlpool answered early")
            self.answered = None
            return False
        ours, self.answered = self.answered, None
        if msg.get("result") != ours["result"]:
            log.warning(
                "the MCP SDK's initialize answer differs from the one sitlpool sent early: sent %s, "
                "the SDK says %s; report this with your mcp version",
                json.dumps(ours.get("result")),
                json.dumps(msg.get("result", msg.get("error"))),
            )
        return True

    def refuse_all(self, why: str) -> None:
        """The server could not start after ``initialize`` was answered: answer every request
        with ``why`` (an agent reads it; a closed pipe would only say "disconnected") until
        the client closes stdin."""
        lines = iter(self.replay[1:] if self.answered else self.replay)
        while True:
            line = next(lines, None)
            if line is None:
                raw = self.inp.readline()
                if not raw:
                    return
                line = raw.decode("utf-8", errors="replace")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and "method" in msg and "id" in msg:
                err = {"code": -32603, "message": f"sitlpool cannot serve: {why}"}
                self.out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": err}).encode() + b"\n")
                self.out.flush()


class _Replay:
    """The lines read before the SDK was loaded, then the rest of stdin."""

    def __init__(self, first: list[str], rest):
        self.first, self.rest = first, rest

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        for line in self.first:
            yield line
        async for line in self.rest:
            yield line


class _Filter:
    """The SDK's stdout, minus its second answer to the early-answered ``initialize``."""

    def __init__(self, wire: Wire, out):
        self.wire, self.out = wire, out

    async def write(self, text: str):
        if self.wire.seen_sdk_answer(text):
            return len(text)
        return await self.out.write(text)

    async def flush(self):
        await self.out.flush()


def serve(host: str = "127.0.0.1", ray: str | None = None) -> int:
    """``sitlpool serve`` over stdio: claim the wire, load the server in a thread while
    answering ``initialize``, then run the SDK on the wire."""
    import threading

    loaded: dict = {}

    def load():
        try:
            from . import server

            loaded["server"] = server
        except BaseException as e:  # re-raised in the main thread
            loaded["error"] = e

    wire = Wire.claim()  # first: nothing the loader prints can reach the wire
    loader = threading.Thread(target=load, name="load the MCP SDK", daemon=True)
    loader.start()
    try:
        wire.answer_initialize()
    except OSError as e:  # pragma: no cover - stdin unreadable: let the SDK find out the same way
        log.warning("reading the first MCP message failed: %s", e)
    loader.join()
    if "error" in loaded:
        e = loaded["error"]
        if wire.answered is None or not isinstance(e, Exception):
            raise e
        # initialize was answered: the client would otherwise read only "disconnected"
        why = f"the MCP SDK failed to load ({type(e).__name__}: {e}); reinstall sitlpool's dependencies"
        print(f"sitlpool: {why}", file=sys.stderr, flush=True)
        wire.refuse_all(why)
        return 1
    try:
        return loaded["server"].serve(None, host, ray=ray, wire=wire)
    except SitlpoolError as e:  # bad settings, an unreachable Ray cluster: before the SDK got the wire
        if wire.handed_over or wire.answered is None:
            raise
        print(f"sitlpool: {e}", file=sys.stderr, flush=True)
        wire.refuse_all(str(e))
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve())
