"""What the tool modules share: the tools' annotations, the ``call`` type, a session's link."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp_types import ToolAnnotations

from ...errors import SessionError
from ...mavlink.recorder import recorder_for
from ...sessions import Sessions
from ...world import held_elsewhere as remote  # a Ray node's link (fleet.remote.RemoteLink)

RO = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ACT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
IDEM = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)

#: ``await call(fn, *a, **kw)``: ``fn`` in a worker thread, sitlpool's errors as MCP tool errors
Call = Callable[..., Awaitable[Any]]


def session_link(sessions: Sessions, session_id: str):
    """The session's link, with its flight recorder attached; refused for a session without one."""
    s = sessions.get(session_id)
    if s.link is None:
        raise SessionError(f"session {session_id} has no link to its vehicle ({s.state}); open a new one")
    if not remote(s.link):  # a Ray node's link has no recorder here (its listeners cannot cross)
        recorder_for(s.link)
    return s.link


def live_link(sessions: Sessions, session_id: str):
    """``session_link`` of a session whose SITL still runs."""
    s = sessions.get(session_id)
    if s.handle.dead or s.link is None:
        raise SessionError(f"session {session_id} is {s.state}; open a new one")
    return session_link(sessions, session_id)


def on_link(sessions: Sessions, fn: Callable[..., Any], *, live: bool = True) -> Callable[..., Any]:
    """``fn(link, *a)`` as ``run(session_id, *a)``: the session's link found first."""

    def run(session_id: str, *a, **kw):
        link = (live_link if live else session_link)(sessions, session_id)
        if remote(link):  # a Ray node's link: the function runs there, where its listeners are
            return link.on_node(fn, *a, **kw)
        return fn(link, *a, **kw)

    return run
