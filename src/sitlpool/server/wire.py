"""The MCP server's stdio wire: what the client sends is answered, where it can be, before
the MCP SDK is loaded.

Importing the MCP SDK is most of a server's start (0.5 s on an idle machine, 1.5 s on a
busy one: it builds every protocol model at import), and an agent's client waits for the
``initialize`` answer (``server/discover`` in the 2026-07-28 protocol) and then for the tool
list before anything else. So ``sitlpool serve`` (stdio) imports the SDK in a thread while
this module, which imports nothing heavy, reads the client's messages and answers
``initialize`` and ``tools/list`` (``early``) from the facts the SDK would use and the tool
list it rendered at a previous start (``toolcache``). The SDK then gets the wire with
everything read replayed; its own answers to what was answered early are compared with
ours (a difference is logged) and not sent twice.

The wire is claimed the way the SDK claims it: fds 0 and 1 are duplicated for the protocol
and pointed at /dev/null and stderr, so a SITL, a child or a stray print never writes into
the JSON-RPC stream. Nothing a client sends can raise out of the wire: a line the early
reader cannot parse (not JSON, nested too deep) is left to the SDK's parse error.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import select
import sys
import threading
from dataclasses import dataclass, field

from ..errors import SitlpoolError
from . import toolcache
from .early import EarlyAnswers, id_key, parse, protocol_versions, version

log = logging.getLogger("sitlpool.server")

MAX_EARLY_LINE = 1 << 20  # a longer line is no initialize/tools/list: not parsed early (the SDK reads it)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def _claim(fd: int, diversion: int) -> int:
    """A private duplicate of ``fd`` for the protocol; ``fd`` itself now points at ``diversion``."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(diversion, fd)
    os.close(diversion)
    return private


class _Prefixed(io.RawIOBase):
    """The client's stream as the SDK reads it: what the wire read before, then the fd."""

    def __init__(self, prefix: bytes, fd: int):
        self.prefix, self.fd = memoryview(prefix), fd

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]  # RawIOBase's stub takes a Buffer
        if self.prefix:
            n = min(len(b), len(self.prefix))
            b[:n] = self.prefix[:n]
            self.prefix = self.prefix[n:]
            return n
        data = os.read(self.fd, len(b))
        b[: len(data)] = data
        return len(data)


@dataclass
class Wire:
    """The claimed stdio: what was read before the SDK had it and what was answered early."""

    fd: int  # the client's messages
    out: io.BufferedIOBase  # our answers
    early: EarlyAnswers = field(default_factory=lambda: EarlyAnswers(None))
    read: bytearray = field(default_factory=bytearray)  # replayed to the SDK
    used_ids: set = field(default_factory=set)  # ids of the requests read early
    pending: dict = field(default_factory=dict)  # id -> early response, until the SDK's own answer is seen
    answered: int = 0  # responses sent early
    early_upto: int = 0  # bytes of the client's stream whose lines went through the early answers
    handed_over: bool = False  # the SDK has the wire
    _inp: io.BufferedReader | None = None

    @classmethod
    def claim(cls) -> Wire:
        fd = _claim(0, os.open(os.devnull, os.O_RDONLY))
        out = os.fdopen(_claim(1, os.dup(2)), "wb", closefd=False)
        return cls(fd, out)

    # ---- before the SDK is loaded --------------------------------------------------------

    def answer_early(self, wake: int) -> None:
        """Read the client's messages and answer what can be answered early, until ``wake``
        is readable (the SDK is loaded) or the client closed its end."""
        line = bytearray()
        skipping = False  # inside a line longer than MAX_EARLY_LINE
        while True:
            try:
                ready, _, _ = select.select([self.fd, wake], [], [])
            except InterruptedError:  # pragma: no cover - a signal with a handler that returns
                continue
            if wake in ready and self.fd not in ready:
                return  # what the client sent before the SDK was ready is read first: an SDK that
                # failed at once must not leave a waiting initialize unanswered (a race seen in CI)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return  # the client left: the SDK reads what there was, then the EOF
            self.read += chunk
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if not skipping:
                    line += chunk[start : end + 1]
                    self._message(bytes(line))
                else:
                    self.early.seen += 1  # a message, not the first one any more
                self.early_upto = len(self.read) - len(chunk) + end + 1
                line.clear()
                skipping = False
                start = end + 1
            if not skipping:
                line += chunk[start:]
                if len(line) > MAX_EARLY_LINE:
                    line.clear()
                    skipping = True

    def answer_late(self, grace_s: float) -> None:
        """The SDK failed before the client had sent anything: what a client on a pipe sends
        within ``grace_s`` is still answered early where it can be (under load the client's
        first bytes can come after a failure that takes milliseconds); a terminal gets no wait."""
        if self.read or os.isatty(self.fd):
            return
        try:
            ready, _, _ = select.select([self.fd], [], [], grace_s)
        except InterruptedError:  # pragma: no cover - a signal with a handler that returns
            return
        if ready:
            wake_r, wake_w = os.pipe()
            os.close(wake_w)  # at EOF: answer_early reads what is there and returns
            try:
                self.answer_early(wake_r)
            finally:
                os.close(wake_r)

    def _message(self, line: bytes) -> None:
        resp = self.early.answer(line, self.used_ids)
        msg = parse(line)
        if msg is not None and "method" in msg and "id" in msg:
            try:
                self.used_ids.add(id_key(msg["id"]))
            except TypeError:  # an unhashable id (a list): the SDK refuses it
                pass
        if resp is not None:
            self.out.write(json.dumps(resp, separators=(",", ":")).encode() + b"\n")
            self.out.flush()
            self.pending[id_key(resp["id"])] = resp
            self.answered += 1

    # ---- the SDK's side ------------------------------------------------------------------

    @property
    def inp(self) -> io.BufferedReader:
        """The client's stream from its first byte (what was read early, then the rest)."""
        if self._inp is None:
            self._inp = io.BufferedReader(_Prefixed(bytes(self.read), self.fd))
            self.read.clear()
        return self._inp

    def streams(self):
        """``(stdin, stdout)`` for the SDK's ``stdio_server``: the client's lines, minus those
        that are no JSON-RPC message (answered here: the SDK drops them without a word), and
        the SDK's answers, minus those to what was answered early."""
        # anyio (11 ms) and the SDK's message types: kept off the path to the early answers; loaded by now
        import anyio
        from mcp_types import jsonrpc_message_adapter

        self.handed_over = True
        text_in = anyio.wrap_file(io.TextIOWrapper(self.inp, encoding="utf-8", errors="replace"))
        text_out = anyio.wrap_file(io.TextIOWrapper(self.out, encoding="utf-8"))  # type: ignore[type-var]
        out = _Filter(self, text_out, anyio.Lock())
        return _Checked(text_in, out, jsonrpc_message_adapter.validate_json), out

    def seen_sdk_answer(self, line: str) -> bool:
        """True if ``line`` is the SDK's answer to a request already answered early (drop it)."""
        if not self.pending:
            return False
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(msg, dict) or "method" in msg:
            return False
        try:
            key = id_key(msg.get("id"))
            ours = self.pending.get(key)
        except TypeError:
            return False
        if ours is None:
            return False
        del self.pending[key]
        res = msg.get("result")
        what = "tools/list" if "tools" in ours["result"] else "initialize"
        if "error" not in msg and not (isinstance(res, dict) and _same_kind(ours["result"], res)):
            # the answer to a later request reusing the id: the SDK never answered ours (it could not parse it)
            log.warning("the MCP SDK did not answer the %s sitlpool answered early", what)
            return False
        if res != ours["result"]:
            log.warning(
                "the MCP SDK's %s answer differs from the one sitlpool sent early: sent %s, "
                "the SDK says %s; report this with your mcp version",
                what,
                json.dumps(ours.get("result"))[:2000],
                json.dumps(msg.get("result", msg.get("error")))[:2000],
            )
        return True

    def refuse_all(self, why: str) -> None:
        """The server could not start after something was answered early: answer every
        other request with ``why`` (an agent reads it; a closed pipe would only say
        "disconnected"), a line that is not JSON with a parse error, until the client
        closes stdin."""
        early = set(self.pending)
        at = 0  # where in the client's stream: lines up to early_upto went through the early answers
        while raw := self.inp.readline():
            at += len(raw)
            if at > self.early_upto and raw.endswith(b"\n"):
                # what arrived after the SDK failed (under load: the whole session) is still answered
                # from the cache where it can be, as it would have been had it come a moment sooner
                sent = self.answered
                self._message(raw)
                if self.answered > sent:
                    continue
            msg = parse(raw)
            if msg is None:
                if raw.strip():
                    self._send({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error"}})
                continue
            if "method" not in msg or "id" not in msg:
                continue
            try:
                key = id_key(msg["id"])
            except TypeError:
                key = None
            if key in early:  # answered early: its first request only
                early.discard(key)
                continue
            self._send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "error": {"code": -32603, "message": f"sitlpool cannot serve: {why}"},
                }
            )

    def _send(self, msg: dict) -> None:
        self.out.write(json.dumps(msg).encode() + b"\n")
        self.out.flush()


def _same_kind(ours: dict, res: dict) -> bool:
    if "tools" in ours:
        return "tools" in res
    return "protocolVersion" in res or "supportedVersions" in res


def refusal(line: str, validation_error: Exception) -> dict | None:
    """The JSON-RPC error for a line the SDK could not take as a message (None: a blank
    line, nothing to answer): a parse error for what is no JSON (or nested deeper than the
    SDK parses), else an invalid request, with its id when it has a usable one."""
    if not line.strip():
        return None
    errors = getattr(validation_error, "errors", None)
    kinds = {e.get("type") for e in errors()} if callable(errors) else set()
    if "json_invalid" in kinds or not kinds:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error"}}
    msg = parse(line.encode("utf-8", errors="replace"))
    rid = msg.get("id") if msg is not None else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        rid = None
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": INVALID_REQUEST, "message": "Invalid Request"}}


class _Checked:
    """The client's lines as the SDK reads them, minus those it cannot take as a message."""

    def __init__(self, lines, out: _Filter, validate):
        self.lines, self.out, self.validate = lines, out, validate

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        async for line in self.lines:
            try:
                self.validate(line, by_name=False)
            except Exception as e:  # what the SDK's reader would get, log and drop
                answer = refusal(line, e)
                if answer is not None:
                    await self.out.send(answer)
                continue
            yield line


class _Filter:
    """The SDK's stdout, minus its second answer to what was answered early."""

    def __init__(self, wire: Wire, out, lock):
        self.wire, self.out, self.lock = wire, out, lock

    async def write(self, text: str):
        if self.wire.seen_sdk_answer(text):
            return len(text)
        async with self.lock:
            return await self.out.write(text)

    async def flush(self):
        async with self.lock:
            await self.out.flush()

    async def send(self, msg: dict) -> None:
        async with self.lock:
            await self.out.write(json.dumps(msg, separators=(",", ":")) + "\n")
            await self.out.flush()


def cached_tools() -> list[dict] | None:
    """The tool list this installation's server rendered at a previous start (``toolcache``)."""
    return toolcache.load(toolcache.key(version()))


def serve(host: str = "127.0.0.1", ray: str | None = None) -> int:
    """``sitlpool serve`` over stdio: claim the wire, load the server in a thread while
    answering what can be answered early, then run the SDK on the wire."""
    loaded: dict = {}
    wake_r, wake_w = os.pipe()

    def load():
        try:
            from . import app  # the MCP SDK: what the early answers overlap (the point of this module)

            loaded["app"] = app
        except BaseException as e:  # re-raised in the main thread
            loaded["error"] = e
        finally:
            os.write(wake_w, b"!")

    wire = Wire.claim()  # first: nothing the loader prints can reach the wire
    wire.early = EarlyAnswers(protocol_versions(), cached_tools)
    loader = threading.Thread(target=load, name="load the MCP SDK", daemon=True)
    loader.start()
    try:
        wire.answer_early(wake_r)
    except OSError as failed:  # pragma: no cover - stdin unreadable: let the SDK find out the same way
        log.warning("reading the first MCP messages failed: %s", failed)
    loader.join()
    os.close(wake_r)
    os.close(wake_w)
    if "error" in loaded:
        e = loaded["error"]
        if isinstance(e, Exception) and not wire.answered:
            wire.answer_late(grace_s=1.0)
        if not wire.answered or not isinstance(e, Exception):
            raise e
        # something was answered: the client would otherwise read only "disconnected"
        why = f"the MCP SDK failed to load ({type(e).__name__}: {e}); reinstall sitlpool's dependencies"
        print(f"sitlpool: {why}", file=sys.stderr, flush=True)
        wire.refuse_all(why)
        return 1
    try:
        return loaded["app"].serve(None, host, ray=ray, wire=wire)
    except SitlpoolError as e:  # bad settings, an unreachable Ray cluster: before the SDK got the wire
        if wire.handed_over or not wire.answered:
            raise
        print(f"sitlpool: {e}", file=sys.stderr, flush=True)
        wire.refuse_all(str(e))
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve())
