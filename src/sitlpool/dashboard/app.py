"""The dashboard's web application (Starlette): the page and its script from the package,
the state as server-sent events, the flight picture, the kept logs' summaries and pictures.

Read-only: every route is a GET that reads files (``Model``); nothing flies, nothing is
written but the response. On loopback a request must name a loopback host (a web page
elsewhere cannot rebind its name to us); on any other address every request needs the
token (``?token=`` once, then a cookie, or ``Authorization: Bearer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .keptlogs import Pictures
from .model import Model

STATIC = Path(__file__).parent / "static"
POLL_S = 0.25  # how often the files are looked at (a state file is written once a second)
KEEPALIVE_S = 15.0
COOKIE = "sitlpool_dashboard"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
LOG_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
HEADERS = {
    # no script but ours, no inline script, no frames: data shown is never run
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def headers_for(tiles_origin: str | None) -> dict[str, str]:
    """``HEADERS``, the map tiles' origin (``https://tile.example.org``) allowed as an image source."""
    if not tiles_origin:
        return HEADERS
    csp = HEADERS["Content-Security-Policy"].replace("img-src 'self' data:", f"img-src 'self' data: {tiles_origin}")
    return dict(HEADERS, **{"Content-Security-Policy": csp})


class Hub:
    """Polls the model in a worker thread and hands each new document to every open stream."""

    def __init__(self, model: Model, poll_s: float = POLL_S) -> None:
        self.model = model
        self.poll_s = poll_s
        self.lock = threading.Lock()  # the model is read and polled from worker threads
        self.cond = asyncio.Condition()
        self.version = -1
        self.logs_version = 0
        self.data = b""  # the latest document, as JSON
        self.logs = b"[]"
        self._task: asyncio.Task | None = None

    def _poll(self) -> tuple[bytes | None, bytes | None]:
        with self.lock:
            old_logs = self.model.logs
            if not self.model.poll() and self.version >= 0:
                return None, None
            doc = json.dumps(self.model.document(), separators=(",", ":")).encode()
            logs = None if self.model.logs is old_logs and self.version >= 0 else json.dumps(self.model.logs).encode()
            return doc, logs

    async def run(self) -> None:
        while True:
            try:
                doc, logs = await asyncio.to_thread(self._poll)
            except Exception:  # the model guards its readers; this keeps the loop alive regardless
                doc, logs = None, None
            if doc is not None:
                async with self.cond:
                    self.data = doc
                    if logs is not None:
                        self.logs = logs
                        self.logs_version += 1
                    self.version += 1
                    self.cond.notify_all()
            await asyncio.sleep(self.poll_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def first(self) -> bytes:
        def doc() -> bytes:
            with self.lock:
                return json.dumps(self.model.document(tracks=True), separators=(",", ":")).encode()

        return await asyncio.to_thread(doc)

    def _newer(self, seen: int) -> bool:
        return self.version != seen

    async def stream(self) -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        async with self.cond:
            await self.cond.wait_for(lambda: self.version >= 0)
        yield b"event: logs\ndata: " + self.logs + b"\n\n"
        yield b"event: state\ndata: " + await self.first() + b"\n\n"
        seen, seen_logs = self.version, self.logs_version
        while True:
            async with self.cond:
                try:
                    await asyncio.wait_for(self.cond.wait_for(partial(self._newer, seen)), KEEPALIVE_S)
                except TimeoutError:
                    pass
                data, logs, seen, lv = self.data, self.logs, self.version, self.logs_version
            if lv != seen_logs:
                seen_logs = lv
                yield b"event: logs\ndata: " + logs + b"\n\n"
            yield b"event: state\ndata: " + data + b"\n\n"


def host_name(header: str) -> str:
    """``127.0.0.1:8765`` -> ``127.0.0.1``, ``[::1]:80`` -> ``[::1]``."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0]


def _clean(x: Any) -> Any:
    """JSON a browser parses: NaN and infinities (a log's summary may hold them) become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


class Guard:
    """Host check on loopback, token check elsewhere; the security headers on every answer."""

    def __init__(self, app: ASGIApp, token: str | None, loopback: bool, headers: dict[str, str] = HEADERS) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        req = Request(scope)
        set_cookie = False
        if self.loopback:
            host = host_name(req.headers.get("host", ""))
            if host not in LOOPBACK_HOSTS:
                await PlainTextResponse("this dashboard answers only to 127.0.0.1/localhost\n", 421)(
                    scope, receive, send
                )
                return
        if self.token is not None:
            given = req.query_params.get("token")
            set_cookie = given is not None and hmac.compare_digest(given.encode(), self.token.encode())
            auth = req.headers.get("authorization", "")
            ok = (
                set_cookie
                or hmac.compare_digest(req.cookies.get(COOKIE, "").encode(), self.token.encode())
                or hmac.compare_digest(auth.removeprefix("Bearer ").encode(), self.token.encode())
            )
            if not ok:
                await PlainTextResponse(
                    "this dashboard needs its token: open the URL `sitlpool dashboard` printed (…/?token=…)\n", 401
                )(scope, receive, send)
                return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += self.headers
                if set_cookie and self.token is not None:
                    headers.append(
                        (b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode())
                    )
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def make_app(
    model: Model,
    token: str | None = None,
    loopback: bool = True,
    poll_s: float = POLL_S,
    tiles_origin: str | None = None,
) -> Starlette:
    """The ASGI application over ``model``; ``token``: required of every request (another
    address); ``tiles_origin``: where the map tiles of ``model.tiles`` come from (the page may load them)."""
    hub = Hub(model, poll_s)
    summaries: dict[str, Any] = {}
    pictures = Pictures(model.data_dir)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def state(request: Request) -> Response:
        return Response(await hub.first(), media_type="application/json")

    async def events(request: Request) -> Response:
        return StreamingResponse(hub.stream(), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})

    async def picture(request: Request) -> Response:
        n = request.path_params["instance"]

        def draw() -> bytes:
            with hub.lock:
                return model.picture(n)

        return Response(await asyncio.to_thread(draw), media_type="image/png")

    async def log_summary(request: Request) -> Response:
        log_id = request.path_params["log_id"]
        if not LOG_ID.fullmatch(log_id):
            return JSONResponse({"error": "not a log id"}, 404)
        if log_id not in summaries:

            def read() -> dict:
                from .. import logs  # pymavlink: only when a summary is asked for

                try:
                    path = logs.LogStore(model.data_dir).path(log_id)
                    return {"id": log_id, "summary": logs.summary(path)}
                except Exception as e:  # a missing or corrupt log is one line on the page
                    return {"id": log_id, "error": f"{type(e).__name__}: {e}"[:300]}

            got = await asyncio.to_thread(read)
            if "error" in got:
                return JSONResponse(got, 404)
            if len(summaries) > 200:
                summaries.clear()
            summaries[log_id] = got
        return Response(
            json.dumps(_clean(summaries[log_id]), default=str, allow_nan=False).encode(), media_type="application/json"
        )

    async def log_picture(request: Request) -> Response:
        log_id = request.path_params["log_id"]
        if not LOG_ID.fullmatch(log_id):
            return PlainTextResponse("not a log id\n", 404)

        def draw() -> bytes | str:
            try:
                return pictures.get(log_id)
            except Exception as e:  # a missing, corrupt or foreign log: one line instead of the picture
                return f"{type(e).__name__}: {e}"[:300]

        got = await asyncio.to_thread(draw)
        if isinstance(got, str):
            return PlainTextResponse(got + "\n", 404)
        return Response(got, media_type="image/png")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub.start()
        try:
            yield
        finally:
            await hub.stop()

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/state", state),
            Route("/events", events),
            Route("/api/picture/{instance:int}.png", picture),
            Route("/api/logs/{log_id}", log_summary),
            Route("/api/logs/{log_id}/picture.png", log_picture),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[Middleware(Guard, token=token, loopback=loopback, headers=headers_for(tiles_origin))],
        lifespan=lifespan,
    )
    app.state.hub = hub
    app.state.started = time.time()
    return app
