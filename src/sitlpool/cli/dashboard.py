"""``sitlpool dashboard [--port N] [--host H] [--ray ADDRESS] [--tiles URL]``: the live web page of the pool.

``add_parser(subparsers)`` registers the command; the dashboard (Starlette, uvicorn) is
imported by the handler only, never at the CLI's start-up.
"""

from __future__ import annotations

import argparse

from ..fleet import cli as fleet_cli
from ._common import EXIT_OK, port_arg, say

DEFAULT_PORT = 8765  # sitlpool.dashboard.DEFAULT_PORT (not imported: start-up time of every command)


def add_parser(sub) -> argparse.ArgumentParser:
    d = sub.add_parser(
        "dashboard",
        help="a live web page of the pool and every vehicle (read-only)",
        description="Serves a read-only page of the pool's leases and every managed vehicle, live. "
        "It listens on 127.0.0.1; another --host needs a token (SITLPOOL_DASHBOARD_TOKEN, or one is "
        "generated and printed with the URL).",
    )
    d.add_argument(
        "--port",
        type=lambda t: 0 if t == "0" else port_arg(t),
        default=DEFAULT_PORT,
        help=f"default {DEFAULT_PORT}; 0: any free port",
    )
    d.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1; another address needs the token")
    d.add_argument(
        "--ray", metavar="ADDRESS", type=fleet_cli.ray_address, help="also show the nodes of this Ray cluster"
    )
    d.add_argument(
        "--tiles",
        metavar="URL",
        help="draw map tiles from this URL under each track, e.g. https://tile.openstreetmap.org/{z}/{x}/{y}.png "
        "(default: SITLPOOL_DASHBOARD_TILES; neither: the maps are drawn offline in local metres)",
    )
    d.set_defaults(fn=cmd_dashboard)
    return d


def cmd_dashboard(a) -> int:
    from ..dashboard import serve  # starlette + uvicorn: only this command imports them

    serve(host=a.host, port=a.port, ray=a.ray, say=say, tiles=a.tiles)
    return EXIT_OK
