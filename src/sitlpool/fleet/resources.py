"""What a node offers the cluster: ``sitl`` = the instances of its pool. Ray-free, so
``sitlpool ray-resources`` answers without importing Ray."""

from __future__ import annotations

from ..config import load_settings

RESOURCE = "sitl"


def ray_resources(settings=None) -> dict[str, float]:
    """What this node offers the cluster: ``{"sitl": <instances in its pool>}``."""
    s = settings or load_settings()
    return {RESOURCE: len(s.pool)}
