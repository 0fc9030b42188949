"""The A/B batch tools: batch_fly (returns its id at once, flies in the background),
batch_status, batch_compare (statistics and a picture), abort_batch. The work is
``sitlpool.batch``'s; these parse and format."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import TextContent

from ...sessions import Sessions
from .common import ACT, RO, Call
from .sessions import agent_param_files


def _batch() -> Any:
    # sitlpool.batch loads scipy, numpy and Pillow (~0.5 s): on a batch tool's first call, not at server start
    from ... import batch

    return batch


def _fly(*a: Any, **kw: Any) -> dict:
    out: dict = _batch().batch_fly(*a, **kw)
    return out


def agent_variants(settings: Any, variants: Any) -> Any:
    """An agent's variants as the server lets an agent give them: parameter files only by name
    beside the presets file, no program of its own (``binary``), unless SITLPOOL_ALLOW_PATHS=1."""
    if not isinstance(variants, dict) or settings.allow_paths:
        return variants  # the batch refuses what is not a dict, in its own words
    out = {}
    for name, v in variants.items():
        if isinstance(v, dict):
            if v.get("binary") is not None:
                raise ToolError(
                    f"variant {name}: binary: an agent names no program to run; the server runs "
                    "SITLPOOL_SITL_BINARY (SITLPOOL_ALLOW_PATHS=1 lets agents name one)"
                )
            if v.get("param_files"):
                try:
                    v = {**v, "param_files": agent_param_files(settings, v["param_files"])}
                except ToolError as e:
                    raise ToolError(f"variant {name}: {e}") from None
        out[name] = v
    return out


def _status(batch_id: str) -> dict:
    out: dict = _batch().batch_status(batch_id)
    return out


def _abort(batch_id: str) -> dict:
    out: dict = _batch().abort_batch(batch_id)
    return out


def _compare(batch_id: str) -> tuple[bytes, dict]:
    out = _batch().batch_compare(batch_id, picture=True)
    png = out.pop("png")
    return png, out


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=ACT)
    async def batch_fly(
        variants: dict[str, Any],
        runs: int,
        steps: list[dict[str, Any]],
        metrics: list[str] | None = None,
        label: str | None = None,
        time_limit_s: float = 600,
        seed: int | None = None,
        concurrency: int | None = None,
        speedup: float | None = None,
        model: str = "quad",
        home: str | None = None,
    ) -> dict:
        """A/B batch: fly the step program `steps` (as fly_steps) `runs` times for each variant, shuffled and
        interleaved, each run on a fresh SITL, as many at once as the pool allows (on a `serve --ray` server: on the
        cluster's nodes, as many as its `sitl` slots). `variants`: {"A": {"params":
        {...}}, "B": {"param_files": [...]}, "C": {"binary": ...}, "D": {"wind_seed": [0, 9]}} (param_files by name beside the
        presets file; binary only with SITLPOOL_ALLOW_PATHS=1). `metrics`: names
        (default all): success, duration_s, max_alt_m, time_to_alt_s, overshoot_m, landing_error_m,
        landing_speed_m_s, max_tilt_deg, battery_used_mah, failsafes. `time_limit_s`: sim seconds per run.
        Returns {"batch_id"} at once; follow it with batch_status, then batch_compare."""
        return await call(
            _fly,
            agent_variants(sessions.settings, variants),
            runs,
            steps,
            metrics,
            label,
            time_limit_s,
            seed,
            concurrency,
            getattr(sessions, "fleet", None),  # serve --ray: the batch flies on its cluster
            speedup=speedup,
            model=model,
            home=home,
            wait=False,
        )

    @mcp.tool(annotations=RO)
    async def batch_status(batch_id: str) -> dict:
        """A batch's progress: per variant runs done, passed and failed of total; state (running, done, aborted,
        interrupted), elapsed, ETA, runs per minute, the failed runs and why, the directory of its JSON/CSV."""
        return await call(_status, batch_id)

    @mcp.tool(annotations=RO)
    async def batch_compare(batch_id: str) -> list[Image | TextContent]:
        """Compare a batch's variants: per metric each variant's n, mean, std, 95% CI; Welch's t-test (continuous)
        or Fisher's exact test (pass/fail) of each variant against the first, Benjamini-Hochberg across all
        (each row: p_value, p_adjusted, significant), effect size (Hedges' g), a verdict in words; and a PNG
        of the distributions side by side. A batch still flying is compared on what it flew (partial)."""
        png, out = await call(_compare, batch_id)
        return [Image(data=png, format="png"), TextContent(type="text", text=json.dumps(out, default=str))]

    @mcp.tool(annotations=ACT)
    async def abort_batch(batch_id: str) -> dict:
        """Stop a batch this server is flying: runs in flight are aborted and counted; what flew is kept."""
        return await call(_abort, batch_id)
