"""Step programs run in the background on a session of their own: ``StepRuns`` (one per
session registry: the MCP tools fly_steps, steps_status, abort_steps and repro), and
``fly`` (the Python API: the same, blocking, on a registry of its own).

Every run opens its session, runs its steps on a thread, closes the session (its SITL
stopped, its logs kept in the log store), and writes ``recipe.json`` and ``run.json`` under
``<data_dir>/runs/<run_id>/``; a repro run also compares its log with the original's."""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import presets, world
from ..config import load_settings
from ..errors import SitlpoolError
from ..flight import resolve_binary
from ..sessions import Sessions
from . import recipe as recipes
from .runner import Runner, RunResult, StepOutcome
from .session_recipes import record_session
from .vocabulary import StepError, validate_steps

log = logging.getLogger("sitlpool.steps")
MAX_TIME_LIMIT_S = 86400.0
# "repeats exactly": every held position the same to the centimetre, i.e. within one unit of
# MAVLink's 1e-7 degree position in each axis (1.1 cm north, 0.9 cm east at 35 degrees: 1.5 cm at most)
POSITION_TOLERANCE_M = 0.015
#: the options a preset gives a step run (``fly(preset=...)``), under those given
PRESET_KEYS = ("model", "instance", "label", "speedup", "home", "params", "wait_s", "param_files", "scripts")
REPRO_WAIT_S = 60.0  # repro of a run of this process whose steps ended waits this long for its recipe


class UnknownRun(SitlpoolError):
    pass


@dataclass
class Run:
    id: str
    result: RunResult
    abort: threading.Event
    session: Any
    options: dict
    param_files: list[dict]
    thread: threading.Thread | None = None
    original: dict | None = None  # a repro's original run document
    there: dict | None = None  # a run flown on a Ray node: the node's last word (its binary, home_seen)
    finished: threading.Event = field(default_factory=threading.Event)


def _limit(time_limit_s) -> float | None:
    if time_limit_s is None:
        return None
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not math.isfinite(time_limit_s):
        raise StepError(f"time_limit_s {time_limit_s!r} is not a number of sim seconds")
    if not 0 < time_limit_s <= MAX_TIME_LIMIT_S:
        raise StepError(
            f"time_limit_s {time_limit_s:g} is out of range; use sim seconds above 0, at most {MAX_TIME_LIMIT_S:g}"
        )
    return float(time_limit_s)


def _param_files(files) -> list[dict]:
    if files is not None and (isinstance(files, (str, bytes)) or not isinstance(files, (list, tuple))):
        raise StepError(f"param_files {str(files)[:60]!r} is not a list of parameter files")
    out = []
    for f in files or []:
        if isinstance(f, dict) and "values" in f:
            out.append({"path": f.get("path"), "sha256": f.get("sha256"), "values": dict(f["values"])})
        else:
            out.append(recipes.read_param_file(f))
    return out


def _script_paths(scripts, settings) -> list[str]:
    """The Lua scripts as files here, for their recipe's hashes: a name is in SITLPOOL_SCRIPTS_DIR."""
    folder = getattr(settings, "scripts_dir", None)
    return [str(Path(x) if Path(x).is_absolute() or folder is None else Path(folder) / x) for x in scripts or []]


def with_preset(preset: str | None, settings, options: dict) -> dict:
    """A step run's ``options`` as open_sitl takes them (``presets.open_options``): the preset's
    values under those given (None: none), named homes resolved, files and scripts checked."""
    o = presets.open_options(preset, settings, **{k: options[k] for k in PRESET_KEYS if k in options})
    o.pop("wipe", None)  # a step run's SITL starts wiped
    return {**{k: v for k, v in options.items() if k not in PRESET_KEYS}, **o}


def _launch_params(params, files: list[dict], wind) -> tuple[dict | None, dict]:
    """``(wind values, launch parameters)``: parameter files first, then ``params``, then the wind."""
    if params is not None and not isinstance(params, Mapping):
        raise StepError(f"params {str(params)[:60]!r} is not a mapping of parameter names to values")
    both: dict[str, float] = {}
    for f in files:
        both.update(f["values"])
    both.update({str(k).upper(): v for k, v in (params or {}).items()})
    if wind is None:
        return None, both
    values = world.wind_option(wind)
    clash = sorted(k for k in values if k in both)
    if clash:
        raise StepError(f"wind and params both set {', '.join(clash)}; give one")
    both.update(values)
    return values, both


class StepRuns:
    """The step runs of one session registry (``Sessions``)."""

    def __init__(self, sessions: Sessions):
        self.sessions = sessions
        self.runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        if not any(getattr(f, "__func__", None) is StepRuns.session_closed for f in sessions.on_close):
            sessions.on_close.append(self.session_closed)  # every session of the registry records its recipe

    def session_closed(self, s) -> None:
        """A session that was not a step run's, closed: its recipe (``record_session``)."""
        if getattr(s, "recorded_by", None) or s.link is None:
            return
        try:
            record_session(self.root, s)
        except OSError as e:
            raise SitlpoolError(
                f"session {s.id}'s recipe was not written under {self.root}: {e.strerror or e}; "
                "make that folder writable for repro(session_id=...)"
            ) from None

    @property
    def root(self) -> Path:
        return Path(self.sessions.settings.data_dir) / "runs"

    # ---- starting -----------------------------------------------------------------------

    def start(
        self,
        steps: list,
        *,
        label: str | None = None,
        time_limit_s: float | None = 600,
        model: str = "quad",
        speedup: float = 1.0,
        home: str | None = None,
        params: dict | None = None,
        param_files: list | None = None,
        scripts: list | None = None,
        wind: dict | None = None,
        instance: int | None = None,
        wait_s: float = 0,
        on_step=None,
        original: dict | None = None,
    ) -> Run:
        """Open a session and start ``steps`` on a thread; returns the ``Run`` at once. Bad steps,
        options or parameter files are refused before anything is launched."""
        validate_steps(steps)
        limit = _limit(time_limit_s)
        files = _param_files(param_files)
        wind_values, launch = _launch_params(params, files, wind)
        if scripts is not None and (isinstance(scripts, (str, bytes)) or not isinstance(scripts, (list, tuple))):
            raise StepError(f"scripts {str(scripts)[:60]!r} is not a list of Lua script names")
        # a recipe's {name, sha256} by its name; checked where the SITL runs (real SITL only)
        scripts = [x.get("name") if isinstance(x, dict) else x for x in scripts or []]
        s = self.sessions.open(
            model, instance, label, speedup, home, launch or None, True, wait_s, scripts=scripts or None
        )
        s.recorded_by = "steps"  # the run writes its own recipe
        try:
            run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            result = RunResult(list(steps), session_id=s.id, run_id=run_id, label=s.label, time_limit_s=limit)
            if original is not None:
                result.repro_of = original.get("run_id")
            options = {
                "model": model,
                "speedup": speedup,
                "home": home,
                "params": dict(params or {}),
                "wind": wind,
                "time_limit_s": limit,
                "scripts": _script_paths(scripts, self.sessions.settings),
            }
            run = Run(run_id, result, threading.Event(), s, options, files, original=original)
            if wind_values is not None and s.link is not None:
                world.record_open_wind(s.link, wind_values)
            with self._lock:
                self.runs[run_id] = run
            run.thread = threading.Thread(
                target=self._run, args=(run, limit, on_step), name=f"steps {run_id}", daemon=True
            )
            run.thread.start()
        except BaseException:
            self._drop(s)  # nothing of a run that never started stays behind
            raise
        return run

    def _drop(self, s) -> None:
        try:
            self.sessions.close(s.id)
        except SitlpoolError:
            pass

    def _run(self, run: Run, limit: float | None, on_step) -> None:
        r = run.result
        there = getattr(run.session, "run_steps_there", None)  # a session on a Ray node: its steps run there
        try:
            if there is not None:
                run.there = there(r, limit, run.abort, on_step)  # mirrored into r as they go
            else:
                Runner(
                    run.session,
                    r.steps,
                    time_limit_s=limit,
                    abort=run.abort,
                    result=r,
                    on_step=on_step,
                    then_close=True,
                ).run()
        except Exception as e:  # Runner.run says its errors in the result; a node's run may fail to start or answer
            r.state, r.ok = ("aborted" if run.abort.is_set() else "failed"), False
            r.error = "aborted" if run.abort.is_set() else str(e) or type(e).__name__
        try:
            self._finish(run)
        except OSError as e:  # <data_dir>/runs not a writable folder: said in one line, the run's result kept
            said = f"run {run.id}: its recipe was not written under {self.root}: {e.strerror or e} (is it a writable folder?)"
            log.warning("%s", said)
            r.error = r.error or said
        except Exception as e:  # pragma: no cover - the run's record must still be written
            log.exception("finishing step run %s", run.id)
            r.error = r.error or f"finishing the run: {e}"
        finally:
            run.finished.set()

    def _finish(self, run: Run) -> None:
        r, s = run.result, run.session
        remote = hasattr(s, "kept_records")  # a session on a Ray node: its logs are kept there
        version = getattr(s.link, "autopilot_version", None) if s.link is not None and not remote else None
        try:
            self.sessions.close(s.id)
        except SitlpoolError:
            pass  # closed already (abort_steps), or its node gone: what it left is still recorded
        join = getattr(s.handle, "join", None)
        if join is not None:
            join(10.0)
        kept = [] if remote else list(getattr(s.handle, "kept_logs", []) or [])
        r.logs = [{"id": k.id, "kind": k.kind, "path": k.path} for k in kept]
        if remote:  # the node's records (node_id, host, its path there: compared here, or fetched)
            r.logs = [dict(k) for k in s.kept_records if k.get("id") != "live"]
        r.log_ids = [k["id"] for k in r.logs]
        there = run.there or {}  # a run on a Ray node: its binary and home, read there
        binary = there.get("binary") or recipes.binary_info(
            resolve_binary(self.sessions.settings, run.options["model"]), version
        )
        doc = recipes.build(
            run_id=run.id,
            open_options=run.options,
            binary=binary,
            param_files=run.param_files,
            result=r,
            session=s,
        )
        if there.get("home_seen"):
            doc["home_seen"] = there["home_seen"]
        d = self.root / run.id
        recipes.write_json(d / "recipe.json", doc)
        r.recipe = str(d / "recipe.json")
        for k in kept:  # a copy beside the logs, in the log store's session directory
            try:
                recipes.write_json(Path(k.path).parent / f"recipe-{run.id}.json", doc)
            except OSError:
                pass
            break
        if run.original is not None:
            original, new = run.original, r.as_dict()
            here = getattr(self.sessions, "logs_here", None)  # logs kept on Ray nodes: each one readable here
            if here is not None:
                original = {**original, "logs": here(original.get("logs") or [], d / "logs")}
                new = {**new, "logs": here(new["logs"], d / "logs")}
            r.comparison = compare_runs(original, new, doc)
            why = [lg["fetch_error"] for lg in (original.get("logs") or []) + new["logs"] if lg.get("fetch_error")]
            if why and r.comparison["logs"].get("error"):  # why a node's log is not here
                r.comparison["logs"]["error"] += f": {why[0]}"
        recipes.write_json(d / "run.json", r.as_dict())

    # ---- asking ---------------------------------------------------------------------------

    def get(self, run_id: str) -> Run:
        run = self.runs.get(run_id) if isinstance(run_id, str) else None
        if run is None:
            known = ", ".join(list(self.runs)[-10:]) or "none"
            raise UnknownRun(f"unknown step run {str(run_id)[:40]!r}; runs of this server: {known}")
        return run

    def status(self, run_id: str) -> dict:
        """Progress (steps done of total, the current step), outcomes, the vehicle's sim time,
        done/ok, log ids once its session is closed; a finished run of another process from disk."""
        try:
            run = self.get(run_id)
        except UnknownRun:
            doc = self.load(run_id)
            if doc is None:
                raise
            return doc
        d = run.result.as_dict()
        if not run.finished.is_set() and (run.result.done or d.get("state") in ("done", "failed", "aborted")):
            d["done"] = False  # still closing its session, keeping its logs and writing its recipe
            d["closing"] = True
            d["state"] = "closing"
        return d

    def load(self, run_id: str) -> dict | None:
        if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id.startswith("."):
            return None
        try:
            return json.loads((self.root / run_id / "run.json").read_text())
        except (OSError, ValueError):
            return None

    def wait(self, run_id: str, timeout: float | None = None) -> RunResult:
        run = self.get(run_id)
        run.finished.wait(timeout)
        return run.result

    def abort(self, run_id: str) -> dict:
        """Stop the steps and close the session (its SITL stopped, its logs kept)."""
        run = self.get(run_id)
        if run.finished.is_set():
            return {"run_id": run_id, "aborted": False, "state": run.result.state, "note": "the run had ended"}
        run.abort.set()
        there = getattr(run.session, "abort_steps", None)  # a session on a Ray node: stopped and closed there
        try:
            if there is not None:
                there()
            else:
                self.sessions.close(run.session.id)
        except SitlpoolError:
            pass  # closed already, or its node gone: the run's thread says how it ended
        run.finished.wait(30)
        return {"run_id": run_id, "aborted": True, "state": run.result.state, "session_id": run.session.id}

    # ---- repro ----------------------------------------------------------------------------

    def find(self, *, run_id=None, log_id=None, session_id=None) -> tuple[dict, dict]:
        """``(run document, recipe)`` of a finished run named by its id, its session or a log it left."""
        if run_id is not None:
            run = self.runs.get(run_id) if isinstance(run_id, str) else None
            if run is not None and not run.finished.is_set():
                if not run.result.done:
                    raise UnknownRun(f"step run {run_id} is still flying; repro it once it has finished (steps_status)")
                run.finished.wait(REPRO_WAIT_S)  # its steps ended: its session closing, its recipe being written
            doc = self.load(run_id)
            if doc is None:
                raise UnknownRun(f"no finished step run {str(run_id)[:40]!r} under {self.root}")
            return doc, recipes.load(self.root / run_id / "recipe.json")
        try:
            dirs = sorted(self.root.iterdir(), reverse=True)
        except OSError:
            dirs = []
        if log_id is not None:
            from ..logs import LogError, LogStore  # sitlpool.logs loads DFReader (~0.4 s): only for repro by log id

            try:
                session_id = LogStore(self.sessions.settings.data_dir).get(str(log_id)).session
            except LogError:  # kept on a Ray node (serve --ray): its run's record here names it
                docs = [x for x in (self.load(d.name) or {} for d in dirs) if log_id in (x.get("log_ids") or [])]
                if not docs:
                    raise
                session_id = docs[0].get("session_id")
            if session_id is None:
                raise UnknownRun(f"log {log_id} was not left by a session")
        if session_id is None:
            raise StepError("repro needs one of run_id, log_id, session_id or recipe")
        for d in dirs:
            doc = self.load(d.name)
            if doc is not None and doc.get("session_id") == session_id:
                return doc, recipes.load(d / "recipe.json")
        raise UnknownRun(
            f"no recipe of session {session_id} under {self.root} (a session records one when it is closed)"
        )

    def repro(self, *, run_id=None, log_id=None, session_id=None, recipe=None, speedup=None, label=None) -> Run:
        """Fly a recorded run again (a new run); once done, its status carries ``comparison``."""
        given = [x for x in (run_id, log_id, session_id, recipe) if x is not None]
        if len(given) != 1:
            raise StepError("repro needs exactly one of run_id, log_id, session_id or recipe")
        if recipe is not None:
            doc = recipes.load(recipe)
            original: dict = {"run_id": doc.get("run_id"), "logs": [], "outcomes": [], "recipe_doc": doc}
        else:
            original, doc = self.find(run_id=run_id, log_id=log_id, session_id=session_id)
            original = {**original, "recipe_doc": doc}
        opts = recipes.open_options(doc)
        if speedup is not None:
            opts["speedup"] = speedup
        return self.start(
            doc["steps"], label=label or f"repro-{doc.get('run_id') or 'recipe'}"[:60], original=original, **opts
        )


def _bin(doc: dict) -> str | None:
    for lg in doc.get("logs") or []:
        if lg.get("kind") == "bin" and Path(lg.get("path", "")).is_file():
            return str(lg["path"])
    return None


def _start(doc: dict) -> float:
    return float(doc.get("sim_time_start_s") or 0.0)


def _metres(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or a.get("lat") is None or b.get("lat") is None:
        return None
    dn = math.radians(b["lat"] - a["lat"]) * 6378137.0
    de = math.radians(b["lon"] - a["lon"]) * 6378137.0 * math.cos(math.radians(a["lat"]))
    dz = (b.get("relative_alt_m") or 0) - (a.get("relative_alt_m") or 0)
    return math.sqrt(dn * dn + de * de + dz * dz)


def compare_runs(original: dict, new: dict, new_recipe: dict) -> dict:
    """The two runs side by side: their logs' summaries (``logs.compare``), the vehicle's
    position at the end of each hold (where it is at rest) and at the end, and whether the
    binary is the same one. ``exact``: no difference in the logs and every held position the same
    to the centimetre (``POSITION_TOLERANCE_M``: one unit of MAVLink's 1e-7 degrees per axis)."""
    out: dict[str, Any] = {"original_run_id": original.get("run_id"), "run_id": new.get("run_id")}
    old_recipe = original.get("recipe_doc") or {}
    sha_a = (old_recipe.get("binary") or {}).get("sha256")
    sha_b = (new_recipe.get("binary") or {}).get("sha256")
    out["same_binary"] = sha_a == sha_b if sha_a and sha_b else None
    lua_a, lua_b = old_recipe.get("scripts") or [], new_recipe.get("scripts") or []
    if lua_a or lua_b:  # the same Lua scripts by name and content
        out["same_scripts"] = [(x.get("name"), x.get("sha256")) for x in lua_a] == [
            (x.get("name"), x.get("sha256")) for x in lua_b
        ]
    a_out, b_out = original.get("outcomes") or [], new.get("outcomes") or []
    rows = []
    for oa, ob in zip(a_out, b_out, strict=False):
        last = oa is a_out[-1] or ob is b_out[-1]
        if oa.get("tool") != "hold_s" and not last:
            continue
        d = _metres(oa.get("position"), ob.get("position"))
        rows.append({"step": oa.get("index"), "tool": oa.get("tool"), "distance_m": None if d is None else round(d, 4)})
    out["positions"] = rows
    dists = [r["distance_m"] for r in rows if r["distance_m"] is not None]
    out["max_position_difference_m"] = max(dists) if dists else None
    out["same_outcomes"] = [o.get("ok") for o in a_out] == [o.get("ok") for o in b_out]
    times = [
        abs((ob.get("sim_time_end_s") or 0) - (ob_start or 0) - ((oa.get("sim_time_end_s") or 0) - (oa_start or 0)))
        for oa, ob in zip(a_out, b_out, strict=False)
        for oa_start, ob_start in [(_start(original), _start(new))]
        if oa.get("sim_time_end_s") is not None and ob.get("sim_time_end_s") is not None
    ]
    out["max_step_time_difference_s"] = round(max(times), 3) if times else None
    a_bin, b_bin = _bin(original), _bin(new)
    if a_bin and b_bin:
        from ..logs import compare  # sitlpool.logs loads DFReader (~0.4 s): only when two logs are compared

        try:
            c = compare(a_bin, b_bin)
            out["logs"] = {
                "a": a_bin,
                "b": b_bin,
                "differences": c["differences"],
                "same": c["same"],
                "side_by_side": c["side_by_side"],
            }
        except Exception as e:
            out["logs"] = {"a": a_bin, "b": b_bin, "error": str(e)}
    else:
        out["logs"] = {"a": a_bin, "b": b_bin, "error": "a DataFlash log of each run is needed to compare them"}
    diffs = (out["logs"] or {}).get("differences")
    out["exact"] = bool(
        diffs == []
        and out["same_outcomes"]
        and dists
        and max(dists) <= POSITION_TOLERANCE_M
        and len(dists) == len(rows)
    )
    return out


_registries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_registries_lock = threading.Lock()


def runs_for(sessions: Sessions) -> StepRuns:
    """The step runs of a session registry (one per registry)."""
    with _registries_lock:
        r = _registries.get(sessions)
        if r is None:
            r = _registries[sessions] = StepRuns(sessions)
        return r


def fly(
    steps: list, *, settings=None, binary: str | None = None, on_step=None, sessions=None, **options: Any
) -> RunResult:
    """Fly ``steps`` on a SITL of its own and return when they end (the SITL stopped, its logs
    kept, its recipe written): ``RunResult``. ``options``: label, time_limit_s (sim seconds,
    default 600), preset, model, speedup, home, params, param_files, scripts, wind, instance, wait_s.
    ``binary``: a SITL binary other than the configured one (its sibling binaries fly other models).
    ``sessions``: the registry to fly on (e.g. ``sitlpool.fleet.ray_sessions(address)``: a Ray
    node, the steps run there), left open for its owner; by default one of this machine's."""
    validate_steps(steps)
    own = sessions is None
    if own:
        settings = settings or load_settings()
        if binary is not None:
            b = Path(binary)
            if not b.is_file():
                raise SitlpoolError(f"binary {binary} does not exist (or is not a file); give a SITL binary's path")
            settings = settings.model_copy(update={"sitl_binary": b})
        sessions = Sessions(settings)
    elif binary is not None:
        raise SitlpoolError("binary goes with this machine's sessions; a registry given flies its own SITLs")
    preset = options.pop("preset", None)
    if preset is not None:
        options = with_preset(preset, sessions.settings, options)
    runs = runs_for(sessions)
    run = None
    try:
        run = runs.start(steps, on_step=on_step, **options)
        run.finished.wait()
        return run.result
    except BaseException:
        if run is not None:
            run.abort.set()
        raise
    finally:
        if run is not None and not run.finished.is_set():
            try:
                sessions.close(run.session.id)
            except SitlpoolError:
                pass
            run.finished.wait(30)
        if own:
            sessions.close_all()


def repro(*, settings=None, on_step=None, sessions=None, **which: Any) -> RunResult:
    """Fly a recorded run again (``run_id=``, ``log_id=``, ``session_id=`` or ``recipe=``) and
    return the new run, its ``comparison`` filled in. ``sessions``: as ``fly``'s."""
    own = sessions is None
    if own:
        sessions = Sessions(settings or load_settings())
    runs = runs_for(sessions)
    try:
        run = runs.repro(**which)
        run.finished.wait()
        return run.result
    finally:
        if own:
            sessions.close_all()


__all__ = [
    "Run",
    "StepOutcome",
    "StepRuns",
    "UnknownRun",
    "compare_runs",
    "fly",
    "repro",
    "runs_for",
    "with_preset",
]
