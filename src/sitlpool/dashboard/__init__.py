"""The live web dashboard of the pool (issue 25): ``sitlpool dashboard [--port N] [--host H] [--ray ADDR]``.

A page served from this package (no CDN) that shows, live through server-sent events, the
pool's leases, every managed vehicle's state file, a map of its track in local metres, its
flight picture, its live log's key fields as small plots and the kept logs with their
summaries and pictures; map tiles under the track when a tile URL is given. It reads state files and lock files only: it takes no
serial port and sends no MAVLink, and nothing on the page flies anything.
"""

from .app import make_app
from .model import Model, vehicle_facts
from .serve import DEFAULT_PORT, TILES_ENV, TOKEN_ENV, Dashboard, is_loopback, serve, tile_url

__all__ = [
    "DEFAULT_PORT",
    "TILES_ENV",
    "TOKEN_ENV",
    "Dashboard",
    "Model",
    "is_loopback",
    "make_app",
    "serve",
    "tile_url",
    "vehicle_facts",
]
