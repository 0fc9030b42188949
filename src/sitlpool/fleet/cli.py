"""The fleet's command-line forms, wired into ``sitlpool`` (cli.py) one line each:
``sitlpool ray-resources``, ``sitlpool batch FILE [--ray ADDRESS]`` and
``sitlpool status --ray ADDRESS [--json]``. Importing this module does not import Ray."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import re
import sys
from pathlib import Path

from ..errors import SitlpoolError
from ..leases import format_age
from .errors import ItemFailed
from .resources import ray_resources

# Ray (an optional dependency, and a second of start-up) and rich are imported only by the
# commands that use them: this module is imported by every ``sitlpool`` command's parser

MAX_SPEEDUP = 1000.0  # as sessions.check_open_args: above 0 and at most 1000
_DECIMAL = r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


def ray_resources_json(settings=None) -> str:
    """The ``--resources`` JSON for ``ray start`` on this node: its pool's size as ``sitl``."""
    return json.dumps(ray_resources(settings))


def speedup_arg(text: str) -> float:
    """``--speedup``: checked when the command line is read, before Ray is started (nan,
    -5 or 1e400 are a usage error at once, not a failure after the cluster connected)."""
    x = float(text) if re.fullmatch(_DECIMAL, text.strip()) else math.nan
    if not math.isfinite(x) or not 0 < x <= MAX_SPEEDUP:
        raise argparse.ArgumentTypeError(f"speedup must be a number above 0 and at most {MAX_SPEEDUP:g}, not {text!r}")
    return x


def retries_arg(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,3}", text.strip()):
        raise argparse.ArgumentTypeError(f"retries must be a whole number from 0 to 999, not {text!r}")
    return int(text)


def add_subcommands(sub) -> None:
    """``ray-resources`` and ``batch`` on sitlpool's subparsers."""
    r = sub.add_parser(
        "ray-resources",
        help="the JSON for ray start --resources: this node's pool as the sitl resource",
        description='ray start ... --resources "$(sitlpool ray-resources)"',
    )
    r.set_defaults(fn=cmd_ray_resources)
    b = sub.add_parser(
        "batch",
        help="run a scenario file's items on SITLs across a Ray cluster (JSON lines out)",
        description="FILE is a Python module with items() (the scenarios) and run(sitl, item) "
        "(one scenario on a ready, leased SITL). One JSON line per item, in item order; "
        "exit 1 if any item failed.",
    )
    b.add_argument("file", nargs="?", default=None, help="the scenario module (.py); or an A/B batch: --variants")
    b.add_argument(
        "--ray",
        metavar="ADDRESS",
        type=ray_address,
        help="the cluster's head (HOST:PORT); default: a Ray of this machine",
    )
    b.add_argument("--model", default=None, help="vehicle model (default: the preset's, else quad)")
    b.add_argument("--preset", metavar="NAME", help="start every SITL from this preset (sitlpool presets lists them)")
    b.add_argument("--speedup", type=speedup_arg, default=None, help="SITL speedup (default SITLPOOL_SPEEDUP)")
    b.add_argument(
        "--retries", type=retries_arg, default=1, help="times an item lost with its node runs again elsewhere"
    )
    b.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the per-node progress bar on stderr (default: when stderr is a terminal)",
    )
    b.set_defaults(fn=cmd_batch)


def add_status_option(status_parser) -> None:
    """``--ray ADDRESS`` on ``sitlpool status``."""
    status_parser.add_argument(
        "--ray", metavar="ADDRESS", type=ray_address, help="every node of the Ray cluster at ADDRESS (HOST:PORT)"
    )


def cmd_ray_resources(a) -> int:
    print(ray_resources_json())
    return 0


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def ray_address(text: str) -> str:
    """``--ray ADDRESS``: the head's ``HOST:PORT`` (or Ray's own ``auto`` / ``ray://...``),
    refused as misuse when blank or malformed (an unset ``$RAY_ADDRESS`` gives ``""``)."""
    t = text.strip()
    host, sep, port = t.rpartition(":")
    if (
        t == "auto"
        or t.startswith("ray://")
        or (sep and host.strip("[]") and port.isascii() and port.isdigit() and 0 < int(port) < 65536)
    ):
        return t
    raise argparse.ArgumentTypeError(
        f"Ray address {text!r} is not HOST:PORT; give the head's address as ray start "
        "--head prints it, e.g. 10.0.0.5:6379"
    )


def load_scenarios(path: str):
    """The user's scenario module, shipped to the nodes by value (they need not have the file)."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "is not a regular file" if p.exists() else "does not exist"
        raise SitlpoolError(f"scenario file {path} {what}; give a .py file with items() and run(sitl, item)")
    spec = importlib.util.spec_from_file_location(f"sitlpool_batch_{abs(hash(str(p.resolve())))}", p)
    if spec is None or spec.loader is None:
        raise SitlpoolError(f"scenario file {path} cannot be loaded as a Python module; give a .py file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise SitlpoolError(
            f"scenario file {path} failed to load: {type(e).__name__}: {_one_line(e)}; fix it and run again"
        ) from None
    except SystemExit as e:
        raise SitlpoolError(
            f"scenario file {path} called sys.exit({e.code!r}) while loading; a scenario file only defines "
            "items() and run(sitl, item)"
        ) from None
    for name in ("items", "run"):
        if not callable(getattr(mod, name, None)):
            raise SitlpoolError(f"scenario file {path} has no function {name}(); it needs items() and run(sitl, item)")
    from ray import cloudpickle  # Ray: an optional dependency, imported by the command that needs it

    cloudpickle.register_pickle_by_value(mod)
    return mod


def _jsonable(x):
    try:
        json.dumps(x)
        return x
    except (TypeError, ValueError):
        return repr(x)


def batch_lines(results, items) -> list[dict]:
    out = []
    for i, (item, r) in enumerate(zip(items, results)):
        if isinstance(r, ItemFailed):
            out.append({"index": i, "item": _jsonable(item), "ok": False, "error": str(r), **r.as_dict()})
        else:
            out.append({"index": i, "item": _jsonable(item), "ok": True, "result": _jsonable(r)})
    return out


def cmd_batch(a) -> int:
    """One JSON line per item on stdout, and nothing else there: while Ray runs, anything
    printed to stdout (Ray's "(raylet) A worker died..." lines, a scenario's prints) goes
    to stderr."""
    from .fleet import Fleet  # Ray: an optional dependency, imported by the command that needs it
    from .launch import DEFAULT_MODEL

    results_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        mod = load_scenarios(a.file)
        try:
            items = list(mod.items())
        except Exception as e:
            raise SitlpoolError(
                f"scenario file {a.file}: items() raised {type(e).__name__}: {_one_line(e)}; it must return "
                "the scenarios (a list or any iterable)"
            ) from None
        fleet = Fleet(a.ray)
        try:
            results = fleet.map(
                mod.run,
                items,
                model=DEFAULT_MODEL if a.model is None else a.model,  # not given: the preset's, else quad
                speedup=a.speedup,
                retries=a.retries,
                progress=a.progress,
                preset=getattr(a, "preset", None),
            )
        finally:
            fleet.close()
    lines = batch_lines(results, items)
    for line in lines:
        print(json.dumps(line), file=results_out, flush=True)
    return 0 if all(x["ok"] for x in lines) else 1


# ---- status --ray ------------------------------------------------------------------------


def status_table(doc: dict):
    from rich.console import Group  # rich: start time of every sitlpool command (see above)
    from rich.table import Table
    from rich.text import Text

    n = Table(title=f"Ray cluster {doc['address']}: {len(doc['nodes'])} nodes", title_justify="left")
    for c in ("node", "host", "sitl slots", "pool", "free", "lock dir"):
        n.add_column(c)
    for x in doc["nodes"]:
        if "error" in x:
            n.add_row(x["node_id"][:8], x["host"], f"{x['sitl']:g}", "?", "?", f"no answer: {x['error']}")
        else:
            n.add_row(x["node_id"][:8], x["host"], f"{x['sitl']:g}", x["pool"], str(x["free_count"]), x["lock_dir"])
    t = Table(title="leases", title_justify="left")
    for c in ("node", "host", "instance", "owner", "pid", "age", "SITL (pid file)"):
        t.add_column(c)
    for h in doc["held"]:
        owner = h["owner"] or f"? (lock file names {h['record_owner']} pid {h['record_pid']})"
        sitl = h.get("sitl")
        sitl_text = "-" if not sitl else f"pid {sitl['pid']} {'running' if sitl['alive'] else 'gone'}"
        t.add_row(
            h["node_id"][:8], h["host"], str(h["instance"]), owner, str(h["pid"]), format_age(h["age_s"]), sitl_text
        )
    parts = [n, t if doc["held"] else Text("no instance is leased on any node")]
    if doc["running_without_lease"]:
        u = Table(title="SITLs running without a lease", title_justify="left")
        for c in ("node", "host", "instance", "pid", "executable"):
            u.add_column(c)
        for d in doc["running_without_lease"]:
            u.add_row(d["node_id"][:8], d["host"], str(d["instance"]), str(d["pid"]), str(d["executable"]))
        parts.append(u)
    return Group(*parts)


def cmd_status(a) -> int:
    """``sitlpool status --ray ADDRESS [--json] [--all]``."""
    from .fleet import Fleet  # Ray: an optional dependency, imported by the command that needs it

    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # Ray's own lines never mix with the document
        fleet = Fleet(a.ray)
        try:
            doc = fleet.status(all=getattr(a, "all", False))
        finally:
            fleet.close()
    if a.json:
        print(json.dumps(doc, indent=2), file=out)
    else:
        from rich.console import Console  # rich: start time (see above)

        Console(file=out).print(status_table(doc))
    return 0


def status_main(argv: list[str]) -> str:
    """``status --ray`` in this process, its output as text (for tests and scripts)."""
    p = argparse.ArgumentParser(prog="sitlpool status")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true")
    add_status_option(p)
    a = p.parse_args(argv)
    buf = io.StringIO()
    old, sys.stdout = sys.stdout, buf
    try:
        cmd_status(a)
    finally:
        sys.stdout = old
    return buf.getvalue()
