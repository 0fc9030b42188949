"""What every ``sitlpool`` command shares: exit codes, one-line reports, argument types."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn, TypeVar

from ..errors import SitlpoolError
from ..instances import parse_instance, parse_port, strict_int
from ..process.managed import printable

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
