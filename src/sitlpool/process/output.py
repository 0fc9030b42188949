"""What a SITL printed, made safe to show: its stderr's tail without terminal escape
sequences or control characters (a binary's raw output must not drive the terminal of
whoever reads our error)."""

from __future__ import annotations

import re
from pathlib import Path

STDERR_TAIL = 8


# terminal escape sequences (CSI, OSC, others) and the remaining control characters
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal escape sequences; other control characters shown as '?'
    (a binary's raw output must not drive the terminal of whoever reads our error)."""
    text = _ESCAPES.sub("", text.replace("\r\n", "\n"))
    return _CONTROLS.sub("?", text.replace("\t", " "))


def stderr_tail(path: Path, lines: int = STDERR_TAIL) -> str:
    """The last ``lines`` lines of a SITL's stderr, made safe to print."""
    try:
        data = path.read_bytes()[-8192:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(printable(ln) for ln in data.strip().splitlines()[-lines:])


__all__ = ["STDERR_TAIL", "printable", "stderr_tail"]
