"""What the MCP server answers before the SDK is loaded: ``initialize`` (and its 2026-07-28
form, ``server/discover``) from the same facts the SDK uses, and ``tools/list`` from the
server's own tool definitions as the SDK rendered them (``toolcache``). Imports nothing heavy.

Each function takes one line the client sent and returns the response to send at once, or
None: the SDK answers it (errors included). A line that cannot be parsed here (not JSON, too
deeply nested, a lone surrogate) is never answered early.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable, Collection
from importlib.metadata import version as dist_version
from pathlib import Path

NAME = "sitlpool"
INSTRUCTIONS = (
    "ArduPilot SITL sessions on leased instances. open_sitl launches a vehicle you own; attach_sitl watches one "
    "someone else runs (read-only unless control=True). Fly with arm/set_mode/takeoff/goto/land/rtl and wait_until; "
    "snapshot says whether the vehicle is ready to arm and why not (wait_until ready_to_arm waits for it); "
    "sitlpool applies the vehicle's rules (copter or plane) for you. close_sitl when done. Every flight's "
    "DataFlash log is kept: list_logs, log_summary, log_fields (log_id live:<session_id> while it flies)."
)
# what the SDK's MCPServer advertises through initialize, and through server/discover (the
# 2026-07-28 protocol); tests/mcp/test_stdio_wire.py fails if the SDK's own answers differ
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


@functools.cache
def version() -> str:
    try:
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
        if vspec is None or vspec.loader is None:
            return None
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


def parse(line: bytes) -> dict | None:
    """``line`` as the SDK will parse it: decoded as its stdin decodes it (a BOM stays a
    character; json.loads(bytes) would skip it), with no lone surrogate (the SDK's parser
    refuses one); None if it is not a JSON object or cannot be parsed here (too deep:
    RecursionError), so that no early answer is given to what the SDK may refuse."""
    try:
        msg = json.loads(line.decode("utf-8", errors="replace"))
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return msg if isinstance(msg, dict) else None


def _request(msg: dict | None, *methods: str) -> tuple[int | str, dict | None] | None:
    """``(id, params)`` if ``msg`` is a JSON-RPC request for one of ``methods``."""
    if msg is None or msg.get("jsonrpc") != "2.0" or msg.get("method") not in methods:
        return None
    rid, params = msg.get("id"), msg.get("params")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return None
    if params is not None and not isinstance(params, dict):
        return None
    return rid, params


def early_answer(line: bytes, versions: tuple[tuple[str, ...], tuple[str, ...]] | None) -> dict | None:
    """The JSON-RPC response to send at once if ``line`` is a well-formed ``initialize`` or
    ``server/discover`` request; None for anything else (the SDK answers it, errors included)."""
    if versions is None:
        return None
    msg = parse(line)
    req = _request(msg, "initialize", "server/discover")
    if msg is None or req is None:
        return None
    rid, params = req
    if params is None:
        return None
    handshake, modern = versions
    if msg["method"] == "server/discover":
        if not _modern_meta(params, modern):
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


def _modern_meta(params: dict, modern: tuple[str, ...]) -> bool:
    """A 2026-07-28 request's params holding only a ``_meta`` the SDK accepts."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return False
    return bool(
        modern
        and meta.get(META + "protocolVersion") in modern
        and _implementation(meta.get(META + "clientInfo"))
        and _capabilities(meta.get(META + "clientCapabilities"))
        and set(params) == {"_meta"}
    )


def tools_list_result(tools: list[dict], modern: bool) -> dict:
    """The ``tools/list`` result the SDK gives for ``tools`` (one page: the SDK does not page)."""
    if not modern:
        return {"tools": tools}
    return {
        "cacheScope": "private",
        "resultType": "complete",
        "tools": tools,
        "ttlMs": 0,
        "_meta": {META + "serverInfo": {"name": NAME, "version": version()}},
    }


class EarlyAnswers:
    """The answers given while the SDK loads, message by message: the first message if it
    is ``initialize``/``server/discover``; then ``tools/list`` from the cached tool list
    (``toolcache``), once the session is as the SDK would have it (legacy: after
    ``notifications/initialized``), never for an id still awaiting the SDK's answer."""

    def __init__(
        self,
        versions: tuple[tuple[str, ...], tuple[str, ...]] | None,
        tools: Callable[[], list[dict] | None] = lambda: None,
    ):
        self.versions = versions
        self._tools = functools.cache(tools)  # read when the first tools/list comes
        self.seen = 0  # messages read
        self.opened: str | None = None  # "legacy" or "modern": the first message was answered early
        self.initialized = False  # legacy: notifications/initialized came after initialize

    def answer(self, line: bytes, used: Collection) -> dict | None:
        """The response to send now for ``line``, or None; ``used``: the ids of the requests
        before it (an answer to a reused id could be mistaken for another's)."""
        self.seen += 1
        if self.seen == 1:
            resp = early_answer(line, self.versions)
            if resp is not None:
                self.opened = "modern" if "supportedVersions" in resp["result"] else "legacy"
            return resp
        if self.opened is None or self.versions is None:
            return None
        msg = parse(line)
        if self.opened == "legacy" and msg == {"jsonrpc": "2.0", "method": "notifications/initialized"}:
            self.initialized = True
            return None
        req = _request(msg, "tools/list")
        if req is None or id_key(req[0]) in used:
            return None
        rid, params = req
        if self.opened == "legacy":
            ok, modern = self.initialized and not params, False
        else:
            ok, modern = params is not None and _modern_meta(params, self.versions[1]), True
        tools = self._tools() if ok else None
        if tools is None:
            return None
        return {"jsonrpc": "2.0", "id": rid, "result": tools_list_result(tools, modern)}


def id_key(rid) -> tuple[str, object]:
    """A request id as a dict key: 1 and "1" are different ids."""
    return type(rid).__name__, rid


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
