"""``sitlpool serve --http PORT``: streamable HTTP on loopback, every request authenticated
by a bearer token.

Loopback is not private on a multi-user machine: any local user can connect. So the server
takes a token at start (``SITLPOOL_HTTP_TOKEN``, at least 32 printable characters, else a
fresh ``secrets.token_urlsafe(32)``), writes it where only its owner can read it
(``<data_dir>/http/serve-<port>.token``: directory 0700, file 0600, replaced atomically,
removed at exit; while it serves it holds a lock on that file, so a second server on the same
port of another loopback address (127.0.0.2, ::1) writes ``serve-<port>-<pid>.token`` instead of
replacing the first one's token) and answers any request without ``Authorization: Bearer <token>`` with 401.
An MCP client sends it as a header, e.g. ``{"type": "http", "url":
"http://127.0.0.1:PORT/mcp", "headers": {"Authorization": "Bearer <token>"}}``.
"""

from __future__ import annotations

import fcntl
import hmac
import ipaddress
import json
import os
import secrets
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer

from ..errors import ConfigError, SitlpoolError

TOKEN_ENV = "SITLPOOL_HTTP_TOKEN"
MIN_TOKEN_CHARS = 32


def check_loopback(host: str) -> None:
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SitlpoolError(
            f"refusing to serve MCP over HTTP on {host}: sitlpool binds loopback only "
            "(127.0.0.1 or ::1); tunnel it if you need it elsewhere"
        )


def check_token(token: str) -> str:
    if len(token) < MIN_TOKEN_CHARS or not all(33 <= ord(c) < 127 for c in token):
        raise ConfigError(
            f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces "
            f"(it has {len(token)} characters); unset it to have a fresh token made at each start"
        )
    return token


def _held(path: Path) -> bool:
    """True if a running server holds ``path`` (its token file) locked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@dataclass
class Token:
    value: str
    path: Path
    fd: int = -1  # the lock on ``path`` held while serving

    @classmethod
    def create(cls, data_dir: Path, port: int) -> Token:
        """The token (from ``SITLPOOL_HTTP_TOKEN`` or fresh), written for the owner alone."""
        given = os.environ.get(TOKEN_ENV)
        value = check_token(given) if given is not None else secrets.token_urlsafe(32)
        d = Path(data_dir) / "http"
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(d, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise ConfigError(f"{d} is not a directory of this user: the HTTP token cannot be kept there")
            if st.st_mode & 0o077:
                os.chmod(d, 0o700)
            path = d / f"serve-{port}.token"
            if _held(path):  # another server on this port (another loopback address): its file is its own
                path = d / f"serve-{port}-{os.getpid()}.token"
            tmp = d / f".serve-{port}.{os.getpid()}.{secrets.token_hex(4)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, value.encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            lock = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise ConfigError(f"cannot write the HTTP token in {d}: {e.strerror or e}") from None
        return cls(value, path, lock)

    def remove(self) -> None:
        """Remove the token file if it is still ours."""
        try:
            if self.path.read_text().strip() == self.value:
                self.path.unlink()
        except OSError:
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the token is written (a port in use is said at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise SitlpoolError(f"cannot serve MCP over HTTP on {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and not self._authorized(scope):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            body = json.dumps(
                {
                    "error": "sitlpool: send Authorization: Bearer <token> (the token is in the file the server named at start)"
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b'Bearer realm="sitlpool"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False


async def run(mcp: MCPServer, host: str, sock: socket.socket, token: Token) -> None:
    """Serve ``mcp`` on ``sock`` behind ``BearerAuth``."""
    port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    print(
        f"sitlpool serve: MCP over HTTP at http://{url_host}:{port}/mcp; token in {token.path} "
        '(send "Authorization: Bearer <token>")',
        file=sys.stderr,
        flush=True,
    )
    app = BearerAuth(mcp.streamable_http_app(host=host), token.value)
    server = uvicorn.Server(uvicorn.Config(app, log_level=mcp.settings.log_level.lower()))
    await server.serve(sockets=[sock])
