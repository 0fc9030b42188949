"""Running the dashboard: the address, the token, uvicorn."""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import SitlpoolError
from .app import make_app
from .model import Model

DEFAULT_PORT = 8765
TOKEN_ENV = "SITLPOOL_DASHBOARD_TOKEN"
TILES_ENV = "SITLPOOL_DASHBOARD_TILES"


class DashboardError(SitlpoolError):
    pass


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; anything else (0.0.0.0, a LAN address) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Dashboard:
    """What ``serve`` runs: ``url`` (with the token when there is one), ``token``, ``server``."""

    host: str
    port: int
    token: str | None
    server: Any = None

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}/" + (f"?token={self.token}" if self.token else "")


def token_for(host: str, environ: os._Environ | dict = os.environ) -> tuple[str | None, str]:
    """``(token, line)``: None on loopback; else ``SITLPOOL_DASHBOARD_TOKEN`` or a new one.
    ``line`` says which, for the person starting it. A token shorter than 32 characters is refused."""
    if is_loopback(host):
        return None, ""
    given = environ.get(TOKEN_ENV)
    if given is not None:
        if len(given) < 32 or not given.isprintable() or any(c in given for c in " ;,&?#%"):
            raise DashboardError(
                f"{TOKEN_ENV} must be at least 32 characters without spaces, ';', ',', '&', '?', '#' or '%' "
                f"to listen on {host}"
            )
        return given, f"{host} is not loopback: every request needs the token from {TOKEN_ENV}"
    tok = secrets.token_urlsafe(24)
    return tok, f"{host} is not loopback: every request needs this token (generated; set {TOKEN_ENV} to choose one)"


def tile_url(url: str) -> tuple[str, str]:
    """``(url, origin)`` of a map tile URL ``http(s)://HOST[:PORT]/...{z}/{x}/{y}...``; the page
    loads tiles from ``origin`` (allowed by its Content-Security-Policy) and nothing else."""
    how = f"give http(s)://HOST/PATH/{{z}}/{{x}}/{{y}}.png (from --tiles or {TILES_ENV})"
    if not isinstance(url, str) or len(url) > 500 or not url.isprintable() or any(c in url for c in " \"'<>;\\`"):
        raise DashboardError(f"map tile URL {str(url)[:100]!r} is not a URL: {how}")
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname or "@" in u.netloc:
        raise DashboardError(f"map tile URL {url!r} is not an http(s) URL of a host: {how}")
    missing = [k for k in ("{z}", "{x}", "{y}") if k not in url]
    rest = url.replace("{z}", "").replace("{x}", "").replace("{y}", "")
    if missing or "{" in rest or "}" in rest:
        what = f"lacks {', '.join(missing)}" if missing else "has a placeholder other than {z}, {x}, {y}"
        raise DashboardError(f"map tile URL {url!r} {what}: {how}")
    try:
        u.port  # noqa: B018  (a port that is not a number raises)
    except ValueError:
        raise DashboardError(f"map tile URL {url!r} has a bad port: {how}") from None
    return url, f"{u.scheme}://{u.netloc}"


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    ray: str | None = None,
    say: Callable[[str], None] = print,
    ready: threading.Event | None = None,
    environ: os._Environ | dict = os.environ,
    settings: Any = None,
    tiles: str | None = None,
) -> Dashboard:
    """Serve until interrupted. ``port`` 0 picks a free one; the URL is said once listening.
    ``tiles``: a map tile URL (else ``SITLPOOL_DASHBOARD_TILES``; neither: the maps are drawn offline)."""
    import uvicorn  # the web server: only `sitlpool dashboard` needs it (start-up of every other command)

    token, line = token_for(host, environ)
    tiles = tiles if tiles is not None else (environ.get(TILES_ENV) or None)
    origin = None
    if tiles is not None:
        tiles, origin = tile_url(tiles)
    fleet_status = None
    fleets: list[Any] = []  # one connection to the cluster for the dashboard's life
    if ray is not None:

        def fleet_status() -> dict:
            if not fleets:
                from ..fleet import Fleet  # Ray: an optional dependency, imported with --ray only

                fleets.append(Fleet(ray))
            return fleets[0].status(all=True, timeout=20)

    model = Model(settings, fleet_status=fleet_status, tiles=tiles)
    app = make_app(model, token=token, loopback=token is None, tiles_origin=origin)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise DashboardError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another --port") from None
    sock.listen(128)
    dash = Dashboard(host, sock.getsockname()[1], token)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    dash.server = server
    if line:
        say(line)
    if tiles is not None:
        say(f"map tiles from {origin} (the page loads them from there; without --tiles the maps are drawn offline)")
    say(f"sitlpool dashboard: {dash.url}  (read-only; Ctrl-C to stop)")
    if ready is not None:
        ready.set()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for f in fleets:
            f.close()
    return dash
