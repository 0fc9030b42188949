"""The MCP server, ``sitlpool serve``.

- ``wire``: the stdio wire; answers ``initialize`` and ``tools/list`` (``early``, from the
  tool list cached by ``toolcache``) while the MCP SDK loads in a thread.
- ``app``: the server (``build``, ``serve``) on the SDK; ``http``: streamable HTTP behind a
  bearer token.
- ``tools``: the tools, one module per subject (sessions, flight, parameters, missions, logs, world,
  pictures).

This package imports nothing heavy: ``serve_stdio`` must answer before the SDK is loaded.
"""

from __future__ import annotations

from .wire import serve as serve_stdio


def serve(
    http_port: int | None = None, host: str = "127.0.0.1", settings=None, ray: str | None = None, wire=None
) -> int:
    """``app.serve``: serve one agent over stdio, a claimed ``wire``, or HTTP (``http_port``)."""
    from .app import serve as app_serve  # the MCP SDK (0.5-1.5 s): only once serving, never for serve_stdio's start

    return app_serve(http_port, host, settings=settings, ray=ray, wire=wire)


__all__ = ["serve", "serve_stdio"]
