"""MAVLink: one link per vehicle on its own thread (pymavlink).

``VehicleLink`` and ``VehicleState`` load pymavlink on first use (it costs ~60 ms)."""

from .endpoints import parse_endpoint

__all__ = ["VehicleLink", "VehicleState", "parse_endpoint"]


def __getattr__(name: str):
    if name in ("VehicleLink", "VehicleState"):
        from . import link

        return getattr(link, name)
    raise AttributeError(name)
