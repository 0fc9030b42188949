"""Recipes: what it takes to fly a run again. A recipe names the binary (path, SHA-256,
version), the model, home, speedup, the parameters set at launch (a wiped EEPROM plus these:
the parameters that differ from the defaults), parameter files by content hash, the wind and
failure seeds, and the steps with the sim times they ran at. Written as JSON under
``<data_dir>/runs/<run_id>/recipe.json`` (and a copy beside the run's logs in the log store)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..pidfiles import read_user_file
from ..process.paramfiles import parse_param_text, read_param_bytes
from .vocabulary import StepError

SCHEMA = 1
_hashes: dict[tuple, str] = {}
_hash_lock = threading.Lock()


def sha256_file(path: str | os.PathLike) -> str:
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    with _hash_lock:
        got = _hashes.get(key)
    if got is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        got = h.hexdigest()
        with _hash_lock:
            _hashes[key] = got
    return got


def _version() -> str:
    try:
        return metadata.version("sitlpool")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source checkout not installed
        return "unknown"


def builtin_hash() -> str:
    """The built-in vehicle's identity: the SHA-256 of its sources (``sitlpool/sim/*.py``)."""
    h = hashlib.sha256()
    sim = Path(__file__).resolve().parent.parent / "sim"
    for p in sorted(sim.glob("*.py")):
        h.update(p.name.encode() + b"\0" + bytes.fromhex(sha256_file(p)))
    return h.hexdigest()


def binary_info(binary: Path | None, version: str | None) -> dict:
    if binary is None:
        return {
            "path": f"{sys.executable} -m sitlpool.sim",
            "builtin": True,
            "sha256": builtin_hash(),
            "version": f"sitlpool {_version()} built-in vehicle",
        }
    return {"path": str(binary), "builtin": False, "sha256": sha256_file(binary), "version": version}


def read_param_file(path: str | os.PathLike) -> dict:
    """``{"path", "sha256", "values"}`` of an ArduPilot parameter file, read as a SITL's
    parameter files are (``process.paramfiles``: NAME VALUE, NAME,VALUE, @READONLY and
    QGroundControl's lines; a regular file of bounded size), refused in one line when it is not one."""
    p = Path(path)
    data = read_param_bytes(p)
    values = parse_param_text(data.decode("utf-8", "replace"), p)
    return {"path": str(p), "sha256": hashlib.sha256(data).hexdigest(), "values": values}


def script_records(scripts: Any) -> list[dict]:
    """Lua scripts a SITL ran, ``{"name", "sha256"}`` each (by name: a repro finds them in its own
    scripts folder, ``SITLPOOL_SCRIPTS_DIR``, and says when the content differs)."""
    out = []
    for p in scripts or []:
        try:
            digest: str | None = sha256_file(p)
        except OSError:
            digest = None
        out.append({"name": Path(p).name, "sha256": digest})
    return out


def seeds(steps: list, wind: dict | None) -> dict:
    """The wind and failure seeds and failures a program uses (from its steps and launch wind)."""
    out: dict[str, Any] = {}
    if wind and wind.get("seed") is not None:
        out["wind_seed"] = wind.get("seed")
    for st in steps:
        if not isinstance(st, dict):
            continue
        if st.get("tool") == "set_wind" and st.get("seed") is not None:
            out.setdefault("wind_seeds", []).append(st["seed"])
        if st.get("tool") == "inject_failure":
            out.setdefault("failures", []).append({k: v for k, v in st.items() if k != "tool"})
    return out


def build(*, run_id: str, open_options: dict, binary: dict, param_files: list[dict], result, session=None) -> dict:
    """The recipe of a run (``open_options``: model, speedup, home, params, wind, label, time_limit_s)."""
    home_seen = None
    link = getattr(session, "link", None)
    if link is not None and link.vehicle.home is not None:
        home_seen = dict(zip(("lat", "lon", "alt_amsl_m"), link.vehicle.home, strict=False))
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "session_id": result.session_id,
        "label": result.label,
        "binary": binary,
        "model": open_options.get("model"),
        "frame": open_options.get("model"),  # SITL's --model names the frame (quad, hexa, X8, ...)
        "home": open_options.get("home"),
        "home_seen": home_seen,
        "speedup": open_options.get("speedup"),
        "params": open_options.get("params") or {},
        "param_files": [{"path": f["path"], "sha256": f["sha256"], "values": f["values"]} for f in param_files],
        "scripts": script_records(open_options.get("scripts")),
        "wind": open_options.get("wind"),
        "seeds": seeds(result.steps, open_options.get("wind")),
        "time_limit_s": open_options.get("time_limit_s"),
        "steps": result.steps,
        "timeline": [
            {
                "step": o.index,
                "tool": o.tool,
                "sim_time_start_s": o.sim_time_start_s,
                "sim_time_end_s": o.sim_time_end_s,
            }
            for o in result.outcomes
        ],
        "repro_of": result.repro_of,
    }


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


MAX_RECIPE_BYTES = 16_000_000  # a recipe of 100,000 steps is far less


def load(recipe: Any) -> dict:
    """A recipe given as a dict, a JSON text or a path to a recipe.json; checked for its steps."""
    doc = recipe
    if isinstance(recipe, (str, os.PathLike)):
        text = str(recipe)
        if text.lstrip().startswith("{"):
            try:
                doc = json.loads(text)
            except ValueError as e:
                raise StepError(f"recipe is not valid JSON: {e}") from None
            except RecursionError:
                raise StepError("recipe is nested too deeply to be a recipe") from None
        else:
            try:  # never a FIFO or /dev/zero (read whole, it would hang or fill memory)
                data, _ = read_user_file(Path(recipe), MAX_RECIPE_BYTES, "recipe")
                doc = json.loads(data.decode("utf-8-sig"))
            except ConfigError as e:
                raise StepError(str(e)) from None
            except ValueError as e:
                raise StepError(f"recipe {text} is not a recipe.json: {e}") from None
            except RecursionError:
                raise StepError(f"recipe {text} is nested too deeply to be a recipe") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise StepError("a recipe is an object with its steps (a recipe.json written by fly_steps)")
    return doc


def open_options(doc: dict) -> dict:
    """fly_steps' options from a recipe: model, speedup, home, params, param_files (their
    recorded values: the files need not exist any more), Lua scripts (by name), wind, time_limit_s."""
    out = {"model": doc.get("model") or "quad", "speedup": doc.get("speedup") or 1, "home": doc.get("home")}
    for key in ("params", "param_files", "wind", "time_limit_s"):
        if doc.get(key):
            out[key] = doc[key]
    if "param_files" in out:
        out["param_files"] = recorded_param_files(out["param_files"])
    scripts = doc.get("scripts")
    if scripts:  # by name: found again in this machine's scripts folder (a recipe never names a path to read)
        if not isinstance(scripts, list) or not all(
            isinstance(x, dict) and isinstance(x.get("name"), str) for x in scripts
        ):
            raise StepError("a recipe's scripts is a list of {name, sha256}, as fly_steps writes them")
        out["scripts"] = [Path(x["name"]).name for x in scripts]
    return out


def recorded_param_files(files: Any) -> list[dict]:
    """A recipe's parameter files: their recorded values, each ``{"path", "sha256", "values"}``.
    A recipe is data an agent may hand over, so a path in it is a name, never a file to open
    (the server would read any file it can and quote it back in an error)."""
    if not isinstance(files, list):
        raise StepError("a recipe's param_files is a list of recorded parameter files ({path, sha256, values})")
    out = []
    for n, f in enumerate(files):
        values = f.get("values") if isinstance(f, dict) else None
        if not isinstance(values, dict):
            raise StepError(
                f"a recipe's param_files[{n}] has no recorded values: a recipe names parameter files by their "
                "values ({path, sha256, values}, as fly_steps writes them), never by a path to read"
            )
        out.append({"path": str(f.get("path"))[:300], "sha256": f.get("sha256"), "values": dict(values)})
    return out


# ---- a session's recipe: any session, not only a step run's ----------------------------------

SESSION_RUN_PREFIX = "session-"  # <data_dir>/runs/session-<session_id>/: a session's recipe and record
END_MARGIN_S = 120.0  # a replayed session's time limit: its own length and this much more


def session_run_id(session_id: str) -> str:
    """``session-<id>``, the id a file name can be (a pytest handle's name may hold ``/`` or ``[``)."""
    return SESSION_RUN_PREFIX + re.sub(r"[^A-Za-z0-9._-]", "_", str(session_id))[:120]


def steps_from_calls(calls: list[dict], end_s: float | None, ended_disarmed: bool = False) -> list[dict]:
    """The flight calls a session made, as a step program on its sim times: each call preceded
    by a hold until the vehicle's clock reads the time it was made at (``hold_until_s``, so the
    time the calls themselves take does not add up); when the session ended disarmed after
    arming, a wait for the disarm (a landing's end comes when the vehicle says, not at a
    fixed time); and a last hold to ``end_s`` (when the session was closed: its log as long as
    the original's)."""
    steps: list[dict] = []
    last = None
    for c in calls:
        t = c.get("sim_time_s")
        if t is not None and (last is None or t > last):
            steps.append({"hold_until_s": round(float(t), 3)})
            last = t
        steps.append({k: v for k, v in c.items() if k != "sim_time_s"})
    if ended_disarmed and any(c.get("tool") == "arm" for c in calls):
        steps.append({"tool": "wait_until", "condition": "disarmed", "timeout_s": END_MARGIN_S})
    if end_s is not None and (last is None or end_s > last):
        steps.append({"hold_until_s": round(float(end_s), 3)})
    return steps


def session_recipe(
    session, opts: dict, calls: list[dict], end_s: float | None, binary: dict, param_files: list[dict]
) -> dict:
    """The recipe of a session (opened by open_sitl, ``Sessions.open``, the pytest plugin, a
    script): its launch options, and the flight calls it made with their sim times, as steps."""
    link = getattr(session, "link", None)
    home_seen = None
    if link is not None and link.vehicle.home is not None:
        home_seen = dict(zip(("lat", "lon", "alt_amsl_m"), link.vehicle.home, strict=False))
    steps = steps_from_calls(calls, end_s, ended_disarmed=link is not None and not link.vehicle.armed)
    return {
        "schema": SCHEMA,
        "kind": "session",
        "run_id": session_run_id(session.id),
        "session_id": session.id,
        "label": session.label,
        "binary": binary,
        "model": opts.get("model"),
        "frame": opts.get("model"),
        "home": opts.get("home"),
        "home_seen": home_seen,
        "speedup": opts.get("speedup"),
        "params": opts.get("params") or {},
        "param_files": [{"path": f["path"], "sha256": f["sha256"], "values": f["values"]} for f in param_files],
        "scripts": script_records(opts.get("scripts")),
        "wind": None,
        "seeds": seeds(steps, None),
        "time_limit_s": round((end_s or 0) + END_MARGIN_S, 3),
        "calls": calls,
        "sim_time_end_s": end_s,
        "steps": steps,
        "timeline": [{"tool": c["tool"], "sim_time_s": c.get("sim_time_s")} for c in calls],
        "repro_of": None,
    }
