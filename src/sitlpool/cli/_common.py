"""What every ``sitlpool`` command shares: exit codes, one-line reports, argument types."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn, TypeVar

from ..errors import SitlpoolError
from ..instances import parse_instance, parse_port, strict_int
from ..process.output import printable
from ..procinfo import ppid

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

T = TypeVar("T")


def say(text: str, file: IO[str] | None = None) -> None:
    """Print a report that may quote others' text (pid files, names in sessions/, argv) without
    the escape sequences it may hold: they would drive the reader's terminal."""
    print(printable(text), file=file or sys.stdout, flush=True)


def err(msg: str) -> None:
    say(f"sitlpool: {msg}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (what, and where to read more)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}; see '{self.prog} --help'\n")


def _typed(fn: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type`` from a parser raising our errors: argparse prints the message."""

    def convert(text: str) -> T:
        try:
            return fn(text)
        except (SitlpoolError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = fn.__name__
    return convert


@_typed
def instance_arg(text: str) -> int:
    return parse_instance(text)


@_typed
def port_arg(text: str) -> int:
    return parse_port(text)


_DECIMAL = r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


def _number(text: str, what: str, low: float, high: float = math.inf, low_ok: bool = True) -> float:
    # float() also takes 'nan', 'inf', '1_0' and '١٠': none of them is a duration or a speed
    x = float(text) if re.fullmatch(_DECIMAL, text) else math.nan
    if not math.isfinite(x) or x < low or (x == low and not low_ok) or x > high:
        rng = f"{'at least' if low_ok else 'above'} {low:g}" + (f" and at most {high:g}" if high != math.inf else "")
        raise argparse.ArgumentTypeError(f"{what} must be a number {rng}, not {text!r}")
    return x


def seconds_arg(text: str) -> float:
    return _number(text, "seconds", 0)


def timeout_arg(text: str) -> float:
    return _number(text, "timeout", 0, low_ok=False)


def speedup_arg(text: str) -> float:
    return _number(text, "speedup", 0, 1000, low_ok=False)


def hold_arg(text: str) -> float:
    return _number(text, "hold", 0)


@_typed
def target_arg(text: str) -> dict[str, Any]:
    """``attach``'s target: an instance number, or an endpoint ``tcp:HOST:PORT``."""
    from ..mavlink.endpoints import parse_endpoint  # only `attach` parses one (the mavlink package: ~10 ms)

    if strict_int(text) is not None:
        return {"instance": parse_instance(text), "text": text}
    if ":" not in text:
        raise ValueError(
            f"{text!r} is neither an instance number (e.g. 40) nor an endpoint tcp:HOST:PORT (e.g. tcp:127.0.0.1:5760)"
        )
    parse_port(text.rpartition(":")[2])  # int() would take '٥٧٦٠' and '5_760'
    parse_endpoint(text)
    return {"endpoint": text, "text": text}


# ---- a session's options: the same flags on every command that starts a SITL ---------------


def param_arg(text: str) -> tuple[str, float]:
    """``--param NAME=VALUE``."""
    name, sep, value = text.partition("=")
    x = float(value) if sep and re.fullmatch(_DECIMAL, value.strip()) else math.nan
    if not name.strip() or not math.isfinite(x):
        raise argparse.ArgumentTypeError(
            f"--param takes NAME=VALUE with a finite number, e.g. RTL_ALT=1500; not {text!r}"
        )
    return name.strip().upper(), x


def wind_arg(text: str) -> dict[str, float]:
    """``--wind SPEED[,FROM_DEG[,TURBULENCE]]`` (m/s, degrees the wind comes from, m/s)."""
    parts = text.split(",")
    if not 1 <= len(parts) <= 3 or not all(re.fullmatch(_DECIMAL, p.strip()) for p in parts):
        raise argparse.ArgumentTypeError(
            f"--wind takes SPEED[,FROM_DEG[,TURBULENCE]] in m/s and degrees, e.g. 5,270 or 8,90,2; not {text!r}"
        )
    return dict(zip(("speed_m_s", "direction_deg", "turbulence"), map(float, parts)))


def add_session_options(p: argparse.ArgumentParser, which: tuple[str, ...] = ("preset",)) -> None:
    """The session flags (of ``which``: preset, home, param, param_file, wind, script), spelt alike on
    every command; ``session_options`` reads them back."""
    if "preset" in which:
        p.add_argument("--preset", metavar="NAME", help="start from this preset (sitlpool presets lists them)")
    if "home" in which:
        p.add_argument(
            "--home", metavar="HOME", help="a named home (CMAC; sitlpool presets lists them) or lat,lon,alt,heading"
        )
    if "param" in which:
        p.add_argument(
            "--param", action="append", type=param_arg, metavar="NAME=VALUE", help="a parameter at boot (repeatable)"
        )
    if "param_file" in which:
        p.add_argument(
            "--param-file",
            dest="param_files",
            action="append",
            metavar="FILE",
            help="a parameter file applied at boot after the tree's defaults (repeatable)",
        )
    if "wind" in which:
        p.add_argument("--wind", type=wind_arg, metavar="SPEED[,FROM_DEG[,TURB]]", help="wind from boot (m/s, degrees)")
    if "script" in which:
        p.add_argument(
            "--script",
            dest="scripts",
            action="append",
            metavar="NAME",
            help="a Lua script in SITLPOOL_SCRIPTS_DIR, run by real SITL (repeatable)",
        )


def session_options(a: argparse.Namespace, options: dict, allowed: tuple[str, ...], command: str) -> dict:
    """``options`` (e.g. a program file's) with the session flags over them (``--param`` merged
    name by name, ``--param-file`` after the others) and the preset's values under everything:
    only the options ``allowed``; a preset setting another (scripts for a command that runs
    none) is one line, before anything starts."""
    from .. import presets  # tomllib and the presets file: only when a session starts

    out = dict(options)
    if getattr(a, "home", None) is not None:
        out["home"] = a.home
    if getattr(a, "wind", None) is not None:
        out["wind"] = a.wind
    if getattr(a, "param", None):
        out["params"] = {**{str(k).upper(): v for k, v in (out.get("params") or {}).items()}, **dict(a.param)}
    if getattr(a, "param_files", None):
        out["param_files"] = [*(out.get("param_files") or []), *a.param_files]
    if getattr(a, "scripts", None):
        out["scripts"] = [*(out.get("scripts") or []), *a.scripts]
    name = getattr(a, "preset", None)
    merged = presets.merge(name, **out) if name is not None else out
    if isinstance(merged.get("home"), str) and "," not in merged["home"]:  # a named home (CMAC) as coordinates
        from .. import locations
        from ..config import load_settings

        merged["home"] = locations.resolve_home(merged["home"], load_settings())  # SITLPOOL_LOCATIONS too
    if name is None:
        return merged
    wrong = sorted(
        k for k, v in merged.items() if k not in allowed and k not in out and v != presets.DEFAULTS.get(k, None)
    )
    if wrong:
        raise SitlpoolError(
            f"preset {name!r} sets {', '.join(wrong)}, which {command} does not take; "
            f"use a preset without {' or '.join(wrong)} (it takes {', '.join(allowed)})"
        )
    return {k: v for k, v in merged.items() if k in allowed}


def preset_variants(name: str | None, variants: dict, allowed: tuple[str, ...]) -> dict:
    """An A/B batch's variants each with the preset under it (``--preset``): its ``params``
    under the variant's, its ``param_files`` first, its model, home and speedup unless the
    variant sets them."""
    if name is None:
        return variants
    out = {}
    for k, v in variants.items():
        if not isinstance(v, dict):
            out[k] = v  # the batch says what is wrong with it
            continue
        given = {x: y for x, y in v.items() if x in ("params", "param_files", "model", "home", "speedup")}
        merged = session_options(argparse.Namespace(preset=name), given, allowed, "an A/B batch")
        out[k] = {**v, **merged}
    return out


def plain(x: Any) -> Any:
    """JSON has no NaN or infinity (a log's float fields may hold them): null, "inf", "-inf"."""
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else str(x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def ancestors() -> set[int]:
    """This process and its parents (``sitlpool run -- sitlpool watch {instance} --control`` or ``mission upload``:
    the lease is held by ``sitlpool run``)."""
    out: set[int] = set()
    pid = os.getpid()
    while pid and pid not in out and len(out) < 64:
        out.add(pid)
        pid = ppid(pid) or 0
    return out


def held_by_another(instance: int | None, endpoint: str | None) -> tuple[int, Any] | None:
    """``(instance, holder)`` when the instance given, or the one ``endpoint`` reaches on this
    machine (however it is spelt), is leased by a process that is neither this one nor one of its
    parents (``sitlpool run`` holds the lease of the command it runs); else None (not leased,
    ours, not an instance here, or an endpoint that attaching will explain). The rule of control
    for ``watch --control`` and ``mission upload``/``clear``."""
    from ..config import load_settings  # lazy: commands that control nothing never load them
    from ..leases import LeasePool
    from ..process.unmanaged import local_instance_of

    n = instance
    if n is None and endpoint is not None:
        try:
            n = local_instance_of(endpoint)  # what it reaches, not how it is spelt
        except (SitlpoolError, ValueError):
            return None
    if n is None:
        return None
    h = LeasePool.from_settings(load_settings(), check=False).holder(n)
    if h is None or h.pid in ancestors():
        return None
    return n, h
