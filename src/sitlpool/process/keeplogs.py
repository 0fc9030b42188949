"""Keeping a managed SITL's logs: once its process is gone (stopped, died, reaped), the
DataFlash logs (``<cwd>/logs/NNNNNNNN.BIN``) and telemetry logs (``*.tlog``) it left are
moved whole into the log store (``logs.LogStore``) with a record of the session that flew
them, then the store is pruned to its budget. A log that cannot be moved (a full disk)
stays where it is, said in one line: collection never loses a log and never raises.
Unmanaged SITLs' logs are never moved (not ours)."""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import pidfiles

if TYPE_CHECKING:
    from ..logs import LogRecord

log = logging.getLogger("sitlpool.logs")

_SESSION_OWNER = re.compile(r"^sitlpool session (\S+) \((.*)\)$")
_FLEET_OWNER = re.compile(r"^sitlpool fleet item (\d+) \((.*)\) pid \d+$")
_PYTEST_OWNER = re.compile(r"^pytest (.+) \[sitl \d+\] \(\S+ pid \d+\)$")  # the pytest plugin's SITLs


def owner_fields(owner: str | None) -> dict:
    """The session id and label an owner string names (``sitlpool session ID (LABEL)``;
    a fleet item's ``sitlpool fleet item N (LABEL) pid P``); none for any other owner."""
    text = (owner or "").split(" (via sitlpool server ")[0]
    m = _SESSION_OWNER.match(text)
    if m:
        return {"session": m.group(1), "label": m.group(2)}
    m = _FLEET_OWNER.match(text)
    if m:
        return {"label": m.group(2), "fleet_item": int(m.group(1))}
    m = _PYTEST_OWNER.match(text)
    if m:  # labelled by the test's name, so `sitlpool logs list --label test_hop` finds it
        return {"label": m.group(1).split("::")[-1], "test": m.group(1)}
    return {}


def binary_name(argv: list[str] | None) -> str:
    """What ran, as a record names it: the executable's name (``arducopter``), or
    ``sitlpool.sim`` for the built-in vehicle (``python -m sitlpool.sim``)."""
    argv = list(argv or [])
    if len(argv) >= 3 and argv[1] == "-m":
        return argv[2]
    return Path(argv[0]).name if argv else "?"


def argv_model(argv: list[str] | None) -> str | None:
    argv = list(argv or [])
    for i, a in enumerate(argv[:-1]):
        if a == "--model":
            return argv[i + 1]
    for a in argv:
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    return None


def run_dir_of(data_dir: Path, instance: int, uid: int) -> Path:
    """Where user ``uid``'s SITL on ``instance`` ran (``pidfiles.run_dir``'s choice, without
    creating anything): ``sessions/<n>``, or ``sessions/<n>/uid-<uid>`` in a group-shared dir."""
    d = pidfiles.session_dir(data_dir, instance)
    try:
        shared = os.lstat(d).st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    except OSError:
        shared = 0
    return d / f"uid-{uid}" if shared else d


def has_logs(logs_dir: Path) -> bool:
    """Anything to collect (cheap: one directory read)."""
    try:
        with os.scandir(logs_dir) as it:
            return any(e.name.upper().endswith(".BIN") or e.name.lower().endswith(".tlog") for e in it)
    except OSError:
        return False


def collect(data_dir: Path, logs_dir: Path, fields: dict, what: str = "") -> list[LogRecord]:
    """Move the closed logs of ``logs_dir`` into ``data_dir``'s store with ``fields``, then
    prune the store to its budget. Never raises: a failure is one warning line and the
    logs it concerns stay in place. Call only once the process that wrote them is gone."""
    if not has_logs(logs_dir):
        return []
    try:
        # sitlpool.logs loads pymavlink's DFReader (~0.4 s): only when there is a log to keep,
        # never for `sitlpool status`, `reap` or `kill`, which import this module
        from ..logs import LogMoveError, LogStore

        store = LogStore(data_dir)
    except Exception as e:  # a bad SITLPOOL_LOG_BUDGET_MB...: the logs stay where they are
        log.warning("%slogs in %s not kept: %s", what, logs_dir, e)
        return []
    try:
        kept = store.collect(logs_dir, fields)
    except LogMoveError as e:
        log.warning("%s%s", what, e)
        kept = list(e.kept)
    except Exception as e:  # never raises: its caller is ending a SITL and must release the lease
        log.warning("%slogs in %s not kept: %s", what, logs_dir, e)
        return []
    if kept:
        try:
            store.prune()
        except Exception as e:  # the budget is kept at the next collection
            log.warning("pruning the log store %s failed: %s", store.root, e)
    return kept


def fields_for(
    *,
    owner: str | None,
    instance: int | None,
    model: str | None,
    argv: list[str] | None,
    binary_version: str | None,
    start: float | None,
    holder: str | None,
    end: float | None = None,
) -> dict:
    binary = binary_name(argv)
    return {
        **owner_fields(owner),
        "holder": holder,
        "instance": instance,
        "model": model,
        "binary": binary,
        "binary_version": binary_version or binary,
        "start": start,
        "end": time.time() if end is None else end,
    }
