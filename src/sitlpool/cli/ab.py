"""``sitlpool ab``: an A/B batch from the command line: a progress bar while it flies, then a
table of the statistics and a picture (``-o``). ``--a``/``--b`` (and ``--variant NAME=FILE``
for more) are JSON files (a parameter object ``{"WPNAV_SPEED_UP": 250}`` or a variant object
``{"params": ..., "param_files": [...], "binary": ..., "wind_seed": [0, 9]}``) or parameter
files (``NAME VALUE`` lines). The library is ``sitlpool.batch``, imported by the handler
(scipy, numpy, Pillow: ~0.5 s) never at start-up. ``add_parser(subparsers)`` registers it."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import SitlpoolError
from ._common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    _number,
    add_session_options,
    preset_variants,
    say,
    speedup_arg,
)

VARIANT_KEYS = ("params", "param_files", "binary", "wind_seed", "failure_seed", "model", "home", "speedup")


def variant_from_file(path: str) -> dict:
    """A variant from a JSON file (parameters or a variant object) or a parameter file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SitlpoolError(f"variant file {path} does not exist; give a JSON file or a parameter file")
    if p.suffix.lower() != ".json":
        return {"param_files": [str(p)]}
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise SitlpoolError(f"variant file {path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SitlpoolError(f"variant file {path} holds {type(doc).__name__}; give an object of parameters")
    if doc and set(doc) <= set(VARIANT_KEYS):
        return doc
    return {"params": doc}


def read_variants(path: str) -> dict:
    """A JSON file of every variant: ``{"A": {"params": ...}, "B": {"param_files": [...]}}``."""
    try:
        doc = json.loads(Path(path).expanduser().read_text())
    except OSError as e:
        raise SitlpoolError(f"cannot read variants file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SitlpoolError(f"variants file {path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SitlpoolError(f"variants file {path} holds {type(doc).__name__}; give an object of NAME: variant")
    return doc


def read_steps(path: str) -> list:
    p = Path(path).expanduser()
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise SitlpoolError(f"cannot read steps file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SitlpoolError(f"steps file {path} is not JSON: {e}") from None
    if isinstance(doc, dict) and "steps" in doc:
        doc = doc["steps"]
    if not isinstance(doc, list):
        raise SitlpoolError(f"steps file {path} holds {type(doc).__name__}; give a list of steps")
    return doc


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _table(c: dict) -> Any:
    from rich.table import Table

    order = list(c["runs"])
    t = Table(title=f"batch {c['batch_id']}" + (" (PARTIAL)" if c["partial"] else ""))
    t.add_column("metric", no_wrap=True)
    for v in order:
        t.add_column(f"{v} mean ±CI95 (n)")
    t.add_column("vs")
    t.add_column("p")
    t.add_column("p adj")
    t.add_column("effect")
    t.add_column("significant")
    for row in c["tests"]:
        m = row["metric"]
        cells = []
        for v in order:
            d = c["metrics"][m][v]
            ci = d.get("ci95")
            half = f" ±{_num((ci[1] - ci[0]) / 2)}" if ci else ""
            cells.append(f"{_num(d['mean'])}{half} ({d['n']})")
        mark = "[bold green]yes[/]" if row["significant"] else "no"
        t.add_row(
            m, *cells, row["variant"], _num(row["p_value"]), _num(row["p_adjusted"]), _num(row["effect_size"]), mark
        )
    return t


def cmd_ab(a: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from .. import batch  # scipy, numpy, Pillow: only when a batch is flown

    variants: dict[str, Any] = {}
    if a.variants:
        variants.update(read_variants(a.variants))
    if a.a:
        variants["A"] = variant_from_file(a.a)
    if a.b:
        variants["B"] = variant_from_file(a.b)
    for spec in a.variant or []:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            raise SitlpoolError(f"--variant {spec!r}: give NAME=FILE")
        variants[name] = variant_from_file(path)
    if len(variants) < 2:
        raise SitlpoolError("give two variants to compare: --a FILE --b FILE, or --variants FILE")
    variants = preset_variants(getattr(a, "preset", None), variants, VARIANT_KEYS)  # --preset under each variant
    steps = read_steps(a.steps)
    fleet = None
    if a.ray is not None:
        from ..fleet import Fleet  # ray: only with --ray

        fleet = Fleet(a.ray or None)
    metrics = a.metrics.split(",") if a.metrics else None
    model = a.model or "quad"  # sitlpool batch's --model is None unless given (a preset's model then)
    b = batch.start_batch(
        variants, a.runs, steps, metrics, a.label, a.time_limit, a.seed, a.concurrency, fleet, a.speedup, model
    )
    console = Console(stderr=True)
    # --json: stdout is the comparison alone; what Ray prints while the batch flies (a node
    # marked dead, its workers' lines) goes to stderr
    quiet = contextlib.redirect_stdout(sys.stderr) if a.json else contextlib.nullcontext()
    with quiet:
        try:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
                disable=a.json,
            ) as bar:
                tasks = {v: bar.add_task(f"{v}", total=a.runs) for v in variants}
                while not b.wait(0.5):
                    st = batch.batch_status(b.id)
                    for v, p in st["variants"].items():
                        bar.update(tasks[v], completed=p["done"], description=f"{v} ({p['failed']} failed)")
                st = batch.batch_status(b.id)
                for v, p in st["variants"].items():
                    bar.update(tasks[v], completed=p["done"], description=f"{v} ({p['failed']} failed)")
        except KeyboardInterrupt:
            b.abort()
            b.wait()
            say(f"aborted; what flew is kept: sitlpool ab compares it with batch_compare {b.id}")
            return EXIT_INTERRUPTED
        finally:
            if fleet is not None:
                fleet.close()
    c = batch.batch_compare(b.id, picture=True)
    png = c.pop("png")
    if a.output:
        Path(a.output).write_bytes(png)
    if a.json:
        print(json.dumps(c, default=str))
    else:
        out = Console()
        out.print(_table(c))
        for v, n in c["failed"].items():
            if n:
                out.print(f"{v}: {n} of {c['runs'][v]} runs failed (counted in success)")
        say(c["verdict"])
        say(f"files: {batch.batch_status(b.id)['directory']}" + (f"; picture: {a.output}" if a.output else ""))
    return EXIT_OK if st["state"] == "done" else EXIT_ERROR


def _whole(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    return n


def _time_limit(text: str) -> float:
    """--time-limit: sim seconds per run, a finite number above 0 (its upper bound is start_batch's)."""
    return _number(text, "time limit (sim seconds per run)", 0, low_ok=False)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sitlpool ab`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "ab",
        help="A/B batch: fly a step program N times per variant, compare with statistics",
        description="Fly STEPS (a JSON list of steps) --runs times for each variant on fresh SITLs, shuffled "
        "and interleaved; then per metric the means, 95%% CIs, Welch/Fisher p-values (Benjamini-Hochberg "
        "adjusted) and effect sizes. Results: <data_dir>/batches/<id>/ (JSON, CSV, PNG).",
    )
    p.add_argument("--a", metavar="FILE", help="variant A: parameters as JSON, or a parameter file")
    p.add_argument("--b", metavar="FILE", help="variant B: parameters as JSON, or a parameter file")
    p.add_argument("--variants", metavar="FILE", help='every variant in one JSON file: {"A": {"params": ...}, ...}')
    p.add_argument("--variant", action="append", metavar="NAME=FILE", help="a further variant (repeatable)")
    p.add_argument("--runs", required=True, type=_whole, metavar="N", help="runs per variant")
    p.add_argument("--steps", required=True, metavar="FILE", help="the step program (JSON list of steps)")
    p.add_argument("--metrics", metavar="M1,M2", help="metrics to compare (default: all)")
    p.add_argument("--time-limit", type=_time_limit, default=600, metavar="S", help="sim seconds per run (default 600)")
    p.add_argument("--seed", type=int, help="the shuffle's seed (the same order again)")
    p.add_argument("--concurrency", type=_whole, metavar="N", help="runs at once (default: free pool, cores)")
    p.add_argument("--speedup", type=speedup_arg, help="SITL speedup (default 10)")
    p.add_argument("--model", default="quad")
    p.add_argument("--label", help="a name for the batch")
    add_session_options(p)  # --preset: under every variant
    p.add_argument("--ray", nargs="?", const="", metavar="HOST:PORT", help="fly on a Ray fleet (no address: local Ray)")
    p.add_argument("-o", "--output", metavar="PNG", help="write the comparison picture here")
    p.add_argument("--json", action="store_true", help="the comparison as JSON on stdout, no progress bar")
    p.set_defaults(fn=cmd_ab)
    return p


def extend_batch_parser(b: argparse.ArgumentParser) -> None:
    """``sitlpool batch --variants FILE --runs N --steps FILE [--ray ADDRESS]``: the fleet's
    batch command flying an A/B batch (on Ray, as ``sitlpool batch`` always does; without
    ``--ray`` a Ray of this machine) instead of a scenario module. Needs the command's FILE
    optional (``nargs="?"``)."""
    scenario_fn = b.get_default("fn")
    b.add_argument("--variants", metavar="FILE", help='A/B batch: every variant in one JSON file {"A": {...}, ...}')
    b.add_argument("--runs", type=_whole, metavar="N", help="A/B batch: runs per variant")
    b.add_argument("--steps", metavar="FILE", help="A/B batch: the step program (JSON list of steps)")
    b.add_argument("--metrics", metavar="M1,M2", help="A/B batch: metrics to compare (default: all)")
    b.add_argument("--time-limit", type=_time_limit, default=600, metavar="S", help="A/B batch: sim seconds per run")
    b.add_argument("--seed", type=int, help="A/B batch: the shuffle's seed")
    b.add_argument("-o", "--output", metavar="PNG", help="A/B batch: write the comparison picture here")
    b.add_argument("--json", action="store_true", help="A/B batch: the comparison as JSON on stdout")

    def cmd(a: argparse.Namespace) -> int:
        if a.variants is None:
            if a.file is None:
                raise SitlpoolError(
                    "give a scenario module (FILE) or an A/B batch (--variants FILE --runs N --steps FILE)"
                )
            code: int = scenario_fn(a)
            return code
        if a.file is not None or a.runs is None or a.steps is None:
            raise SitlpoolError("an A/B batch is --variants FILE --runs N --steps FILE, without a scenario module")
        a.a = a.b = a.variant = a.label = a.concurrency = None
        a.ray = a.ray or ""  # sitlpool batch flies on Ray: its own address, else a Ray of this machine
        return cmd_ab(a)

    b.set_defaults(fn=cmd)
