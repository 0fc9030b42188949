"""Recipes of sessions that were not step runs: a session opened by open_sitl (MCP), by
``Sessions.open`` or around a managed handle (the pytest plugin, ``ManagedManager``) writes,
once closed, its launch options and the flight calls its link's recorder saw, with their sim
times, as a step program (``recipe.session_recipe``), so that ``repro(session_id=...)`` flies
it again on sim time and compares the logs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ..config import load_settings
from ..errors import SitlpoolError
from ..mavlink.recorder import recorder_for
from . import recipe as recipes


def _options_of(s) -> dict:
    """What a session was opened with: ``Sessions.open``'s record, else its managed handle's own."""
    opts = dict(getattr(s, "options", None) or {})
    if opts:
        return opts
    h = s.handle
    return {
        "model": getattr(h, "model", None),
        "speedup": getattr(h, "speedup", None),
        "home": getattr(h, "home", None),
        "params": dict(getattr(h, "launch_params", None) or {}),
        "param_files": list(getattr(h, "param_files", None) or []),
        "binary": getattr(h, "binary", None),
    }


def recipe_of(s, names: dict | None = None) -> dict:
    """The recipe document of a closed session (anything with ``id``, ``label``, ``handle`` and
    ``link``): its launch options and the flight calls its link's recorder saw, with their sim
    times, as steps. ``names``: a parameter file's path -> the name it is recorded under (a Ray
    node's copy of a driver's file: the driver's name)."""
    join = getattr(s.handle, "join", None)
    if join is not None:
        join(10.0)  # its logs are kept once its SITL's end is handled
    rec = recorder_for(s.link)
    opts = _options_of(s)
    files = []
    for f in opts.get("param_files") or []:
        try:
            got = recipes.read_param_file(f)
        except SitlpoolError:
            got = {"path": str(f), "sha256": None, "values": {}}
        files.append({**got, "path": (names or {}).get(str(f), got["path"])})
    binary = recipes.binary_info(opts.get("binary"), getattr(s.link, "autopilot_version", None))
    return recipes.session_recipe(s, opts, rec.recorded_calls(), rec.sim_time_s(), binary, files)


def record_session(root: Path, s) -> Path:
    """Write the recipe of a closed session (``recipe_of``; or ``s.recipe_doc``, the one made
    where it flew: a Ray node's actor, its kept logs' records in ``s.kept_records``) and a run
    record, under ``root/session-<id>/`` so that ``repro(session_id=...)`` flies it again. The
    path of the recipe."""
    doc = getattr(s, "recipe_doc", None)
    here = doc is None
    if doc is None:
        doc = recipe_of(s)
        kept = [{"id": k.id, "kind": k.kind, "path": k.path} for k in getattr(s.handle, "kept_logs", []) or []]
    else:
        kept = [dict(k) for k in getattr(s, "kept_records", None) or [] if k.get("id") != "live"]
    d = root / doc["run_id"]
    recipes.write_json(d / "recipe.json", doc)
    run_doc = {
        "run_id": doc["run_id"],
        "kind": "session",
        "session_id": s.id,
        "label": s.label,
        "state": "done",
        "done": True,
        "ok": True,
        "steps": doc["steps"],
        "outcomes": [],
        "log_ids": [k["id"] for k in kept],
        "logs": kept,  # on a Ray node: the node's paths (node_id, host: Fleet.fetch_log copies one here)
        "recipe": str(d / "recipe.json"),
    }
    recipes.write_json(d / "run.json", run_doc)
    for k in kept[:1] if here else []:  # a copy beside the logs, in the log store's session directory
        try:
            recipes.write_json(Path(k["path"]).parent / f"recipe-{doc['run_id']}.json", doc)
        except OSError:
            pass
    return d / "recipe.json"


def record_handle(handle, label: str | None = None, settings=None) -> Path:
    """``record_session`` for a managed SITL handle stopped by its owner (``ManagedManager``,
    the pytest plugin): its recipe under ``<data_dir>/runs/session-<handle name>/``."""
    settings = settings or load_settings()
    s = SimpleNamespace(id=handle.name, label=label or handle.name, handle=handle, link=handle.link, options={})
    return record_session(Path(settings.data_dir) / "runs", s)
