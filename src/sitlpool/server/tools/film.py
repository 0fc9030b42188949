"""The render_flight tool: a film (MP4 or GIF) of a flight from its log, for a bug report,
drawn by ``sitlpool.logs.film``. The log is named as the log tools name it (a kept log's id
or ``live:<session_id>``, never a path); the film is written under ``<data_dir>/films/``
(the newest ``KEEP_FILMS`` of this user kept) and its path returned with a key frame (the
last: the whole track) as an MCP image."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import TextContent

from ...sessions import Sessions
from .common import ACT, Call
from .logs import LogToolError, plain, resolve

KEEP_FILMS = 50  # the newest films of this user kept in <data_dir>/films (older ones deleted)
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def films_dir(sessions: Sessions) -> Path:
    return Path(sessions.settings.data_dir) / "films"


def _prune(folder: Path, keep: int) -> None:
    """Delete this user's films beyond the newest ``keep`` (never another user's file)."""
    mine = []
    me = os.geteuid()
    for p in folder.iterdir():
        try:
            st = p.lstat()
        except OSError:
            continue
        if p.suffix in (".mp4", ".gif") and p.is_file() and not p.is_symlink() and st.st_uid == me:
            mine.append((st.st_mtime, p))
    for _, p in sorted(mine, reverse=True)[keep:]:
        p.unlink(missing_ok=True)


def film_of(
    sessions: Sessions,
    log_id: str,
    format: str,
    fps: int,
    speed: float | None,
    t0: float | None,
    t1: float | None,
) -> tuple[bytes, dict]:
    from ...logs.film import FORMATS, render_flight  # Pillow, pymavlink: on the first call only (as logs.py)

    if format not in FORMATS:
        raise LogToolError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    path = resolve(sessions, log_id)  # ids or live:<session_id>, never a path
    folder = films_dir(sessions)
    name = _SAFE.sub("-", log_id)[:64] + time.strftime("-%Y%m%d-%H%M%S-") + secrets.token_hex(3) + "." + format
    film = render_flight(
        path,
        folder / name,
        fps=fps,
        speed=speed,
        format=format,
        t0=t0,
        t1=t1,
        title=f"log {log_id}",
    )
    _prune(folder, KEEP_FILMS)
    return film.key_frame, plain({"log_id": log_id, **film.as_dict()})


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=ACT)
    async def render_flight(
        log_id: str,
        format: str = "mp4",
        fps: int = 10,
        speed: float | None = None,
        t0: float | None = None,
        t1: float | None = None,
    ) -> list[Image | TextContent]:
        """A film of a flight for a bug report: the map (track so far, home, mission waypoints, in metres from home)
        and a HUD (mode, armed, altitude, speeds, battery, log time, the last messages, an altitude strip) over
        time, from a log (a kept log's id or "live:<session_id>"). format "mp4" (H.264) or "gif"; fps 1-60 (gif
        1-25); speed: log seconds per film second (default: real time, faster for flights over 2 minutes so the
        film lasts 2 minutes); t0..t1: a log-time range (s). Returns the key frame (the last: the whole track) as
        an image and a JSON line with the film's path (under <data_dir>/films/), frames, duration and speed."""
        png, doc = await call(film_of, sessions, log_id, format, fps, speed, t0, t1)
        return [Image(data=png, format="png"), TextContent(type="text", text=json.dumps(doc))]
