"""The live web dashboard of the pool (issue 25): ``sitlpool dashboard [--port N] [--host H] [--ray ADDR]``.

A page served from this package (no CDN) that shows, live through server-sent events, the
pool's leases, every managed vehicle's state file, a map of its track in local metres, its
flight picture and the kept logs. It reads state files and lock files only: it takes no
serial port and sends no MAVLink, and nothing on the page flies anything.
"""

from .app import make_app
from .model import Model, vehicle_facts
from .serve import DEFAULT_PORT, TOKEN_ENV, Dashboard, is_loopback, serve

__all__ = ["DEFAULT_PORT", "TOKEN_ENV", "Dashboard", "Model", "is_loopback", "make_app", "serve", "vehicle_facts"]
