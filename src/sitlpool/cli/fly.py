"""``sitlpool fly FILE.json``: run a step program on a SITL of its own (``sitlpool.steps.fly``),
printing each step as it ends and the result; ``--json`` prints the result document.

FILE holds a list of steps, or an object ``{"steps": [...], "model", "speedup", "home",
"params", "param_files", "scripts", "wind", "time_limit_s", "label"}`` (a recipe.json written by a run
is one: flying it flies the run again). Flags given on the command line win over the file's."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import SitlpoolError
from ..pidfiles import read_user_file
from ._common import EXIT_ERROR, EXIT_OK, add_session_options, say, seconds_arg, session_options, speedup_arg

MAX_PROGRAM_BYTES = 8_000_000
OPTIONS = ("model", "speedup", "home", "params", "param_files", "scripts", "wind", "time_limit_s", "label")


def read_program(path: str) -> tuple[list, dict]:
    """``(steps, options)`` from a program file; one line when it is not one."""
    try:
        os.stat(path)
    except OSError as e:
        raise SitlpoolError(f"{path}: {e.strerror}") from None
    data, _ = read_user_file(Path(path), MAX_PROGRAM_BYTES, "step program")  # never a FIFO or /dev/zero
    try:
        doc = json.loads(data.decode("utf-8-sig"))  # a BOM, as Windows editors write it, is no error
    except RecursionError:
        raise SitlpoolError(f"{path} is nested too deeply to be a step program") from None
    except ValueError as e:
        raise SitlpoolError(f"{path} is not JSON: {e}") from None
    if isinstance(doc, list):
        return doc, {}
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        return doc["steps"], {k: doc[k] for k in OPTIONS if doc.get(k) is not None}
    raise SitlpoolError(f'{path}: give a list of steps, or an object with "steps" (and open options)')


def _line(o: Any, total: int) -> str:
    what = o.tool if o.tool != "hold_s" else f"hold {o.step.get('hold_s')} s"
    if o.tool == "wait_until":
        what += f" {o.step.get('condition')}" + (f" {o.step['value']}" if o.step.get("value") is not None else "")
    t = f"sim {o.sim_time_start_s:.2f}" if o.sim_time_start_s is not None else "sim ?"
    if o.ok is None:
        return f"  {o.index}/{total} {what} ... ({t} s)"
    end = f"{o.sim_time_end_s:.2f}" if o.sim_time_end_s is not None else "?"
    return f"  {o.index}/{total} {what}: {'ok' if o.ok else 'FAILED: ' + str(o.error)} ({t} -> {end} s)"


def cmd_fly(a: argparse.Namespace) -> int:
    from .. import steps  # the flight stack (pymavlink): only `sitlpool fly` loads it
    from ..sessions import check_open_args  # with the flight stack, as above

    program, options = read_program(a.file)
    for k in ("model", "speedup", "label", "time_limit_s"):
        v = getattr(a, k, None)
        if v is not None:
            options[k] = v
    options = session_options(a, options, (*OPTIONS, "instance", "wait_s"), "sitlpool fly")  # --preset, --param...
    steps.validate_steps(program)
    model, speedup, *_ = check_open_args(options.get("model", "quad"), options.get("speedup", 1))  # before any is shown
    total = len(program)

    def progress(o):
        if not a.json and o.ok is not None:
            say(_line(o, total))

    sessions = None
    if a.ray is not None:
        from ..fleet import ray_sessions  # ray: only with --ray

        sessions = ray_sessions(a.ray or None)  # the steps run on a node, beside its SITL
    if not a.json:
        where = f" on the Ray cluster at {a.ray or 'this machine'}" if a.ray is not None else ""
        say(f"flying {total} steps from {a.file} ({model}, speedup {speedup:g}){where}")
    try:
        r = steps.fly(program, on_step=progress, sessions=sessions, **options)
    finally:
        if sessions is not None:
            sessions.close_all()
    if a.json:
        print(json.dumps(r.as_dict(), indent=1, default=str))
    else:
        dur = r.sim_duration_s
        say(
            f"{'ok' if r.ok else 'FAILED'}: {sum(1 for o in r.outcomes if o.ok)}/{total} steps, "
            f"{dur if dur is not None else '?'} sim s in {r.wall_s} s (run {r.run_id}, session {r.session_id})"
        )
        if r.error:
            say(f"  {r.error}")
        if r.log_ids:
            say(f"  logs: {', '.join(r.log_ids)} (sitlpool logs show ID)")
        if r.recipe:
            say(f"  recipe: {r.recipe}")
    sys.stdout.flush()
    return EXIT_OK if r.ok else EXIT_ERROR


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sitlpool fly`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "fly",
        help="run a step program (JSON) on a SITL of its own, timed on sim time",
        description='FILE: a JSON list of steps ({"tool": "takeoff", "altitude_m": 10}, {"hold_s": 5}, ...) '
        'or an object with "steps" and open options (a run\'s recipe.json flies it again). '
        "Exit 0 when every step did what it asked, 1 otherwise.",
    )
    p.add_argument("file", metavar="FILE", help="the step program (JSON)")
    p.add_argument("--speedup", type=speedup_arg, help="sim seconds per wall second (default: the file's, else 1)")
    p.add_argument("--model", help="vehicle model (default: the file's, else quad)")
    p.add_argument("--label", help="the session's label")
    p.add_argument(
        "--time-limit",
        dest="time_limit_s",
        type=seconds_arg,
        metavar="SIM_SECONDS",
        help="fail the run after this many sim seconds (default 600)",
    )
    add_session_options(p, ("preset", "home", "param", "param_file", "wind", "script"))  # over the file's options
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="HOST:PORT",
        help="fly on a node of a Ray fleet, the steps beside its SITL (no address: a Ray of this machine)",
    )
    p.add_argument("--json", action="store_true", help="print the result document (JSON)")
    p.set_defaults(fn=cmd_fly)
    return p
