"""MAVLink: one link per vehicle on its own thread (pymavlink)."""

from .link import VehicleLink, VehicleState, parse_endpoint

__all__ = ["VehicleLink", "VehicleState", "parse_endpoint"]
