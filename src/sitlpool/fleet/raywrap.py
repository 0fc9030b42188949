"""Ray's exceptions put on one line for sitlpool's users: what a node raised, not Ray's traceback."""

from __future__ import annotations

import ray

from ..errors import SitlpoolError


def unwrap(e: BaseException) -> BaseException:
    """Ray wraps an actor's or task's exception in RayTaskError: give back our own error, or
    one line naming what the node raised (not Ray's traceback of it)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, SitlpoolError):
        return cause
    if isinstance(e, ray.exceptions.RayTaskError) and cause is not None:
        return SitlpoolError(f"{type(cause).__name__} on the node: {ray_reason(cause)[:300]}")
    return e


def ray_reason(e: BaseException) -> str:
    """Ray's own words for a death, on one line."""
    text = " ".join(str(e).split())
    return text[:600] + ("..." if len(text) > 600 else "")
