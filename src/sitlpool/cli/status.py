"""``sitlpool status [--json] [--all] [--watch]``: the document of ``sitlpool.status``, as a table."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ..fleet import cli as fleet_cli
from ..leases import format_age
from ..process.output import printable
from ..statefile import describe
from ..status import pool_status
from ._common import EXIT_OK


def status_doc(all_: bool) -> dict:
    """``sitlpool status --json``'s document (kept for callers of the old name)."""
    return pool_status(all_=all_)


def program_name(executable: str | None, cmdline: list[str] | None) -> str:
    """What a person calls the program: ``arducopter``, ``sitlpool-sim``, ``sitlpool.sim``
    for ``python -m sitlpool.sim`` (a venv's interpreter path says nothing)."""
    argv = list(cmdline or [])
    exe = os.path.basename(executable or (argv[0] if argv else "") or "?")
    if exe.startswith("python") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            return argv[2]
        if not argv[1].startswith("-"):
            return os.path.basename(argv[1])
    return exe


def status_table(doc: dict) -> Any:
    # rich is imported only to draw the table: `status --json` and every other command skip its ~25 ms
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    # every cell is a Text, never a str: rich reads a str as markup, so an owner, a path or a
    # process's argv holding "[/]" made status fail for everyone, and "[link=...]" forged links;
    # printable() drops the escape sequences another user's text could send to our terminal
    def cell(value: object) -> Text:
        return Text(printable(str(value)))

    parts: list[Any] = [cell(f"warning: {w}") for w in doc.get("warnings", ())]
    t = Table(title=cell(f"leases in {doc['lock_dir']} (pool {doc['pool']})"), title_justify="left")
    for c in ("instance", "owner", "pid", "age", "in pool", "SITL (pid file)"):
        t.add_column(c)
    for h in doc["held"]:
        owner = h["owner"] or f"? (lock file names {h['record_owner']} pid {h['record_pid']})"
        sitl = h["sitl"]
        sitl_text = (
            "-"
            if sitl is None
            else (f"{program_name(sitl['binary'], None)} pid {sitl['pid']} {'running' if sitl['alive'] else 'gone'}")
        )
        pid = h["pid"]
        if h.get("kept_by"):  # `sitlpool run` killed, its command still holding the lease
            pid = f"{pid} exited; kept by pid {', '.join(map(str, h['kept_by']))}"
        t.add_row(
            *map(cell, (h["instance"], owner, pid, format_age(h["age_s"]), "yes" if h["in_pool"] else "no", sitl_text))
        )
    parts.append(t if doc["held"] else Text("no instance is leased"))
    for h in doc.get("broken", ()):
        parts.append(
            cell(
                f"BROKEN LEASE on instance {h['instance']}: pid {h['pid']} ({h['record_owner'] or '?'}) holds a lock "
                "file that was removed or replaced; the instance may be leased twice"
            )
        )
    if doc["running_without_lease"]:
        u = Table(title="SITLs running without a lease", title_justify="left")
        for c in ("instance", "pid", "program", "clients", "free to attach"):
            u.add_column(c)
        for d in doc["running_without_lease"]:
            cl = "; ".join(f"{k}: {', '.join(v)}" for k, v in d["clients"].items() if v) or "none"
            row = (
                d["instance"],
                d["pid"],
                program_name(d["executable"], d["cmdline"]),
                cl,
                d["free_to_attach"] or "no",
            )
            u.add_row(*map(cell, row))
        parts.append(u)
    if doc.get("live"):
        lv = Table(title="live state (from the launchers' state files)", title_justify="left")
        for c in ("instance", "SITL pid", "state"):
            lv.add_column(c)
        for d in doc["live"]:
            lv.add_row(*map(cell, (d["instance"], d.get("sitl_pid") or "-", describe(d))))
        parts.append(lv)
    parts += [cell(f"unreadable: {u}") for u in doc.get("unreadable", ())]
    line = f"{doc['free_count']} free in the pool"
    if "free" in doc:
        line += ": " + ", ".join(map(str, doc["free"]))
    if doc["ports_taken"]:
        if "free" in doc:  # --all: who took them
            line += "; ports taken: " + "; ".join(
                f"{t['instance']} ({', '.join(t['ports'])})" for t in doc["ports_taken"]
            )
        else:
            line += "; ports taken: " + ", ".join(str(t["instance"]) for t in doc["ports_taken"])
    parts.append(cell(line))
    return Group(*parts)


def cmd_status(a: argparse.Namespace) -> int:
    if getattr(a, "ray", None) is not None:
        return fleet_cli.cmd_status(a)
    if a.json:
        print(json.dumps(pool_status(all_=a.all), indent=2))
        return EXIT_OK
    from rich.console import Console  # drawing only (see status_table)
    from rich.live import Live

    console = Console()
    if not a.watch:
        console.print(status_table(pool_status(all_=a.all)))
        return EXIT_OK
    try:
        with Live(status_table(pool_status(all_=a.all)), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(1)
                live.update(status_table(pool_status(all_=a.all)))
    except KeyboardInterrupt:
        return EXIT_OK  # Ctrl-C is how a watch ends
