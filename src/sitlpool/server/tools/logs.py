"""Tools for flight logs, with mcardupilot's names: list_logs, log_summary, log_fields,
log_messages, log_compare, pin_log, unpin_log, log_picture.

An agent names a log by a kept log's id (``list_logs`` gives them;
``LogStore.resolve(x, allow_paths=False)``: never a path) or ``live:<session_id>``, the log
an open session of this server is writing now (read up to its last whole message). The
answers name logs by id, never by path, and hold no NaN or infinity (JSON has none).
``sitlpool.logs`` loads pymavlink's DFReader (~0.2 s): it is imported on the first log tool
call, never at the server's start.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import TextContent

from ...errors import SitlpoolError
from ...sessions import Sessions
from .common import IDEM, RO, Call

if TYPE_CHECKING:
    from ...logs import LogStore

LIVE = "live:"
MAX_ID = 64  # longer is no log id (and is not quoted back whole)
MAX_LIST = 1000  # the most records one list_logs answer may ask for
MAX_ANSWER_POINTS = 200_000  # fields x max_points in one log_fields answer: an agent reads it whole


class LogToolError(SitlpoolError):
    """A log tool's refusal: one line."""


def plain(x: Any) -> Any:
    """JSON has no NaN or infinity (a log's float fields may hold them): null, "inf", "-inf"."""
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else str(x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def store_of(sessions: Sessions) -> LogStore:
    from ...logs import LogStore  # pymavlink's DFReader: on the first log tool call only (module docstring)

    return LogStore(sessions.settings.data_dir)


def _live_session(sessions: Sessions, log_id: str):
    sid = log_id[len(LIVE) :]
    s = sessions.get(sid)  # an open session of this server, or one line naming those open
    current = getattr(s.handle, "current_log", None)
    if current is None:
        raise LogToolError(f"session {sid} has no live log readable here ({s.kind} session)")
    return s, current


def resolve(sessions: Sessions, log_id: str) -> Path:
    """The file ``log_id`` names: a kept log's id, or ``live:<session_id>``. Never a path."""
    if not isinstance(log_id, str) or not log_id:
        raise LogToolError("give a log id (list_logs gives them), or live:<session_id> for an open session's log")
    if len(log_id) > MAX_ID or any(not c.isprintable() for c in log_id):
        raise LogToolError(
            f"that is not a log id ({len(log_id)} characters): ids look like 20261201-124301-a1b2c3 "
            "(list_logs gives them), or live:<session_id>"
        )
    if log_id.startswith(LIVE):
        s, current = _live_session(sessions, log_id)
        p = current()
        if p is None and getattr(s.handle, "dead", False):
            raise LogToolError(
                f"session {s.id}'s SITL has ended ({s.state}): its logs are kept, list_logs(session_id={s.id!r}) "
                "gives their ids"
            )
        if p is None:
            raise LogToolError(
                f"session {s.id} has no log yet: ArduPilot starts one at arming (at boot with LOG_DISARMED=1); "
                "the logs of a session that ended are kept: list_logs(session_id=...)"
            )
        return Path(p)
    return store_of(sessions).resolve(log_id, allow_paths=False)


def _named(doc: dict, log_id: str) -> dict:
    """A library result with the log named by its id instead of its path."""
    doc = dict(doc)
    doc.pop("path", None)
    return {"log_id": log_id, **doc}


def _kept_id(log_id: str) -> str:
    if isinstance(log_id, str) and log_id.startswith(LIVE):
        raise LogToolError(
            f"{log_id} is still being written: it is kept when its session closes; pin it then by its id "
            "(list_logs(session_id=...) gives it)"
        )
    if not isinstance(log_id, str) or len(log_id) > MAX_ID:
        raise LogToolError("that is not a log id: ids look like 20261201-124301-a1b2c3 (list_logs gives them)")
    return log_id


# ---- what the tools do (in a worker thread) -------------------------------------------------------


def list_records(
    sessions: Sessions, session_id: str | None, label: str | None, since: str | float | None, limit: int
) -> dict:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise LogToolError(f"limit must be a whole number from 1 to {MAX_LIST}, not {limit!r}")
    store = store_of(sessions)
    recs = store.list(session=session_id, label=label, since=since)
    live = []  # a log being written now is newer than any `since`
    for s in sessions.open_sessions():
        if (session_id is not None and s.id != session_id) or (label is not None and s.label != label):
            continue
        current = getattr(s.handle, "current_log", None)
        p = current() if current is not None else None
        try:
            size = Path(p).stat().st_size if p is not None else None
        except OSError:  # it ended meanwhile: its log is being kept
            size = None
        if size is not None:
            live.append({"log_id": f"{LIVE}{s.id}", "session": s.id, "label": s.label, "size": size, "live": True})
    return plain(
        {
            "total": len(recs),
            "more": len(recs) > limit,
            "budget_mb": store.budget_mb,
            "kept_bytes": sum(r.size for r in recs if r.managed),
            "live": live,
            "logs": [r.as_dict() for r in recs[:limit]],
        }
    )


def summary_of(sessions: Sessions, log_id: str) -> dict:
    from ...logs import summary  # as store_of

    return plain(_named(summary(resolve(sessions, log_id)), log_id))


def fields_of(
    sessions: Sessions, log_id: str, names: list[str] | str, t0: float | None, t1: float | None, max_points: int
) -> dict:
    from ...logs import MAX_POINTS, fields  # as store_of

    wanted = {n for n in names.replace(",", " ").split() if n} if isinstance(names, str) else set(map(str, names))
    ok_points = isinstance(max_points, int) and not isinstance(max_points, bool) and 2 <= max_points <= MAX_POINTS
    if ok_points and len(wanted) * max_points > MAX_ANSWER_POINTS:  # a bad max_points: fields() says so
        raise LogToolError(
            f"{len(wanted)} fields x max_points {max_points} is more than one answer holds "
            f"({MAX_ANSWER_POINTS} points): ask for fewer fields or fewer points"
        )
    return plain(_named(fields(resolve(sessions, log_id), names, t0, t1, max_points), log_id))


def messages_of(
    sessions: Sessions, log_id: str, type: str, t0: float | None, t1: float | None, offset: int, limit: int
) -> dict:
    from ...logs import messages  # as store_of

    return plain(_named(messages(resolve(sessions, log_id), type, t0, t1, offset, limit), log_id))


def compare_of(sessions: Sessions, log_a: str, log_b: str) -> dict:
    from ...logs import compare  # as store_of

    out = compare(resolve(sessions, log_a), resolve(sessions, log_b))
    out["a"] = _named(out["a"], log_a)
    out["b"] = _named(out["b"], log_b)
    return plain({"a_id": log_a, "b_id": log_b, **out})


def set_pin(sessions: Sessions, log_id: str, pinned: bool) -> dict:
    store = store_of(sessions)
    rec = store.pin(_kept_id(log_id)) if pinned else store.unpin(_kept_id(log_id))
    return plain(rec.as_dict())


def picture_of(
    sessions: Sessions, log_id: str, names: list[str] | str, t0: float | None, t1: float | None
) -> tuple[bytes, dict]:
    from ...logs import picture  # as store_of

    wanted = [n for n in names.replace(",", " ").split() if n] if isinstance(names, str) else list(names)
    path = resolve(sessions, log_id)
    span = f"{t0:g}" if t0 is not None else "start"
    span += f"-{t1:g} s" if t1 is not None else "-end"
    png = picture(path, wanted, t0, t1, title=f"log {log_id}: {', '.join(wanted)} ({span}, log time)")
    return png, {"log_id": log_id, "fields": wanted, "t0": t0, "t1": t1, "png_bytes": len(png)}


# ---- the tools ----------------------------------------------------------------------------------


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=RO)
    async def list_logs(
        session_id: str | None = None, label: str | None = None, since: str | float | None = None, limit: int = 50
    ) -> dict:
        """Kept flight logs (DataFlash .BIN, each with its id and record: session, label, instance, model, binary,
        start/end, size, pinned), newest first, at most `limit` (1-1000); filters: session_id, label, since (an age
        like "30m", "2h", "7d", an ISO 8601 time or Unix seconds). `live` lists the logs this server's open sessions
        are writing now, as "live:<session_id>": any log tool reads them while the vehicle flies."""
        return await call(list_records, sessions, session_id, label, since, limit)

    @mcp.tool(annotations=RO)
    async def log_summary(log_id: str) -> dict:
        """Summary of a log (a kept log's id or "live:<session_id>"): duration, flight phases (boot, armed on ground,
        takeoff, climb, hover/cruise, descent, landing, disarmed) with start/end, modes with their times, max/min
        altitude, max speeds, distance flown, battery used, events, errors, failsafes and every MSG text, each with
        its log time (s since boot) so an answer can quote the log. `end` says if the log stops short (truncated)."""
        return await call(summary_of, sessions, log_id)

    @mcp.tool(annotations=RO)
    async def log_fields(
        log_id: str,
        fields: list[str] | str,
        t0: float | None = None,
        t1: float | None = None,
        max_points: int = 500,
    ) -> dict:
        """Series of `TYPE.Field` names (["CTUN.Alt", "BAT.Volt"], or "CTUN.Alt BAT.Volt"; "GPS[1].Spd" for
        instance 1) over log time t0..t1 (s), each downsampled to at most max_points (2-10000) keeping each
        bucket's min and max (peaks). log_id: a kept log's id (list_logs) or "live:<session_id>"."""
        return await call(fields_of, sessions, log_id, fields, t0, t1, max_points)

    @mcp.tool(annotations=RO)
    async def log_messages(
        log_id: str,
        type: str,
        t0: float | None = None,
        t1: float | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> dict:
        """Raw messages of one type (e.g. "MODE", "MSG", "GPS") with t0 <= time <= t1 (s, log time), a page at a
        time: `offset` messages skipped, at most `limit` (1-1000) returned, `more` says if others follow."""
        return await call(messages_of, sessions, log_id, type, t0, t1, offset, limit)

    @mcp.tool(annotations=RO)
    async def log_compare(log_a: str, log_b: str) -> dict:
        """Two logs' summaries side by side with the differences named (durations, altitudes, speeds, distance,
        battery; mode, phase, event, error and failsafe sequences) within stated tolerances."""
        return await call(compare_of, sessions, log_a, log_b)

    @mcp.tool(annotations=IDEM)
    async def pin_log(log_id: str) -> dict:
        """Keep a kept log whatever the disk budget (SITLPOOL_LOG_BUDGET_MB): pruning never deletes a pinned log."""
        return await call(set_pin, sessions, log_id, True)

    @mcp.tool(annotations=IDEM)
    async def unpin_log(log_id: str) -> dict:
        """Let pruning delete a kept log again (oldest unpinned first, once the store is over its budget)."""
        return await call(set_pin, sessions, log_id, False)

    @mcp.tool(annotations=RO)
    async def log_picture(
        log_id: str, fields: list[str] | str, t0: float | None = None, t1: float | None = None
    ) -> list[Image | TextContent]:
        """A PNG of up to 8 `TYPE.Field` series (e.g. ["CTUN.Alt", "CTUN.DAlt"]) over log time t0..t1 (s), one panel
        each, flight modes as coloured bands, arming and disarming marked; plus a one-line JSON summary."""
        png, summary = await call(picture_of, sessions, log_id, fields, t0, t1)
        return [Image(data=png, format="png"), TextContent(type="text", text=json.dumps(summary))]
