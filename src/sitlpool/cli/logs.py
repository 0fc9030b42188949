"""``sitlpool logs``: the kept flight logs for people (tables) and scripts (``--json``).

``list``, ``show`` (summary), ``fields``, ``messages``, ``compare``, ``pin``, ``unpin``,
``prune``, ``path``, ``picture`` and ``film``. Where a command names a log (LOG), a kept
log's id or a path to any DataFlash ``.BIN`` works (``pin``/``unpin`` take kept ids only). The library is
``sitlpool.logs``; it is imported by the handlers, never at start-up (pymavlink: ~90 ms).
``add_parser(subparsers)`` registers the command on the CLI's parser.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import struct
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..instances import strict_int
from ..process.output import printable
from ._common import EXIT_ERROR, EXIT_OK, _number, err, plain, say, seconds_arg

if TYPE_CHECKING:
    from ..logs import LogStore

LIST_DEFAULT = 20  # `logs list` shows the newest this many (`--all`: every one)
_AGE = re.compile(r"\s*\d+(?:\.\d+)?\s*[smhd]\s*")


# ---- argument types ---------------------------------------------------------------------------


def _int_arg(what: str, low: int, high: int):
    def convert(text: str) -> int:
        n = strict_int(text)
        if n is None or not low <= n <= high:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number from {low} to {high}, not {text!r}")
        return n

    convert.__name__ = what
    return convert


def since_arg(text: str) -> str | float:
    """``--since``: an age (30m, 2h, 7d) or an ISO 8601 time (the store parses them), Unix seconds."""
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text) and len(text.partition(".")[0]) >= 9:
        return float(text)  # Unix seconds (an ISO date is 8 digits at most)
    try:
        if _AGE.fullmatch(text) or datetime.fromisoformat(text):
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: give an age like 30m, 2h, 7d, an ISO 8601 time or Unix seconds")


def budget_arg(text: str) -> float:
    v = float(text) if re.fullmatch(r"[0-9]+\.?[0-9]*|\.[0-9]+", text) else math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"budget must be a number of MB above 0, not {text!r}")
    return v


# ---- output -------------------------------------------------------------------------------------


def _json(doc: Any) -> int:
    print(json.dumps(plain(doc), indent=2))
    return EXIT_OK


def _console() -> Any:
    from rich.console import Console  # drawing tables only: --json and `path` skip rich's ~25 ms

    return Console()


def _table(title: str, columns: list[str], rows: list[list[Any]], keep: tuple[str, ...] = ()) -> Any:
    from rich import box  # as _console
    from rich.table import Table
    from rich.text import Text

    # every cell a Text, never a str (rich would read "[...]" in a log's text as markup), and
    # printable(): a log from anywhere may hold escape sequences aimed at the reader's terminal
    t = Table(title=Text(printable(title)), title_justify="left", box=box.SIMPLE_HEAD)
    for c in columns:
        t.add_column(c, no_wrap=c in keep, min_width=len(c) if c in keep else None)  # keep: never cut
    for r in rows:
        t.add_row(*(Text(printable("-" if v is None else str(v))) for v in r))
    return t


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _t(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _end_line(end: dict) -> str | None:
    """One line when a log does not end cleanly (a SITL killed mid-write)."""
    if not end or end.get("status") == "complete":
        return None
    last = end.get("last_time")
    at = f", last message at {last:.3f} s" if last is not None else ""
    return f"log {end['status']}: read up to byte {end['offset']} of {end['size']}{at} ({end.get('detail', '')})"


# ---- the store and names ------------------------------------------------------------------------


def _store() -> LogStore:
    from ..logs import LogStore  # pymavlink, the log reader: only `sitlpool logs` pays its ~90 ms

    return LogStore()


def _resolve(store: LogStore, name: str, ids_only: bool = False) -> tuple[Path, str | None]:
    """A kept log's id or (unless ``ids_only``) a path to any log file -> (file, id or None)."""
    from ..logs import UnknownLog  # as _store
    from ..logs.store import ID_RE

    try:
        if ids_only and not ID_RE.match(name):
            what = "a file" if os.path.isfile(name) else "not a log id"
            raise UnknownLog(f"{name!r} is {what}: give a kept log's id (list_logs gives them)")
        return store.resolve(name, allow_paths=True), (name if ID_RE.match(name) else None)
    except UnknownLog as e:  # the store's words are for agents: people list with the CLI
        raise UnknownLog(str(e).replace("list_logs", "`sitlpool logs list`")) from None


# ---- handlers -----------------------------------------------------------------------------------


def cmd_list(a: argparse.Namespace) -> int:
    store = _store()
    recs = store.list(session=a.session, label=a.label, since=a.since)
    shown = recs if a.all else recs[:LIST_DEFAULT]
    if a.json:
        doc = {"store": str(store.root), "budget_mb": store.budget_mb, "total": len(recs)}
        return _json(dict(doc, logs=[r.as_dict() for r in shown]))
    con = _console()
    if not recs:
        say(f"no kept logs in {store.root}" + (" match" if a.session or a.label or a.since else ""))
        return EXIT_OK
    rows = [
        [
            r.id,
            _when(r.end or r.start),
            r.session,
            r.label,
            f"{r.size / 1e6:.1f}",
            ("yes" if r.pinned else "") + ("" if r.managed else " in place") or "-",
        ]
        for r in shown
    ]
    con.print(
        _table(
            f"kept logs in {store.root}, newest first",
            ["id", "ended", "session", "label", "MB", "pin"],
            rows,
            keep=("id", "ended", "MB"),
        )
    )
    if len(shown) < len(recs):
        say(f"{len(recs) - len(shown)} older logs not shown: --all lists them")
    return EXIT_OK


def _show_text(s: dict, log_id: str | None) -> None:
    con = _console()
    head = [
        f"log {log_id}: {s['path']}" if log_id else f"log {s['path']}",
        f"{s['vehicle'] or 'vehicle ?'}, {s['firmware'] or 'firmware ?'}; {_mb(s['size'])}",
        f"log time {_t(s['start'])} to {_t(s['end_time'])} s ({s['duration']:.1f} s)",
    ]
    end = _end_line(s["end"])
    if end:
        head.append(f"warning: {end}")
    alt, spd, bat = s["altitude"], s["speed"], s["battery"]
    if alt["max"] is not None:
        head.append(
            f"altitude ({alt['source']}): max {alt['max']} m at {_t(alt['max_time'])} s, "
            f"min {alt['min']} m at {_t(alt['min_time'])} s"
        )
    head.append(
        f"speed: horizontal max {spd['max_horizontal']} m/s, climb max {spd['max_climb']} m/s, "
        f"descent max {spd['max_descent']} m/s; distance flown {s['distance_m']} m"
    )
    if bat:
        head.append(f"battery: used {bat['used_mah']} mAh ({bat['used_wh']} Wh), min {bat['volt_min']} V")
    for line in head:
        say(line)
    con.print(
        _table(
            "phases",
            ["phase", "from (s)", "to (s)", "duration (s)", "altitude (m)"],
            [
                [p["phase"], _t(p["start"]), _t(p["end"]), p["duration"], f"{p['alt_start']} -> {p['alt_end']}"]
                for p in s["phases"]
            ],
        )
    )
    con.print(
        _table(
            "modes",
            ["mode", "number", "reason", "from (s)", "to (s)"],
            [[m["mode"], m["number"], m["reason"], _t(m["start"]), _t(m["end"])] for m in s["modes"]],
        )
    )
    rows = [[_t(e["time"]), "event", e["name"]] for e in s["events"]]
    rows += [[_t(e["time"]), "FAILSAFE" if e["failsafe"] else "error", e["text"]] for e in s["errors"]]
    rows += [[_t(m["time"]), "MSG", m["text"]] for m in s["messages"]]
    rows.sort(key=lambda r: float(r[0]) if r[0] != "-" else -1.0)
    con.print(_table("events, errors and messages", ["time (s)", "kind", "text"], rows))


def cmd_show(a: argparse.Namespace) -> int:
    from ..logs import summary  # as _store

    path, log_id = _resolve(_store(), a.log)
    s = summary(path)
    if a.json:
        return _json({"id": log_id, **s})
    _show_text(s, log_id)
    return EXIT_OK


def cmd_fields(a: argparse.Namespace) -> int:
    from ..logs import fields  # as _store

    path, log_id = _resolve(_store(), a.log)
    doc = fields(path, a.fields, a.t0, a.t1, a.max_points)
    if a.json:
        return _json({"id": log_id, **doc})
    end = _end_line(doc["end"])
    for name, s in doc["fields"].items():
        unit = f" ({s['unit']})" if s["unit"] else ""
        pts = list(zip(s["t"], s["v"]))
        line = f"{name}{unit}: {len(pts)} points"
        if s["downsampled"]:
            line += f" of {s['count']} (downsampled keeping peaks; --max-points for more)"
        if pts:
            lo, hi = min(pts, key=lambda p: p[1]), max(pts, key=lambda p: p[1])
            line += f"; min {_num(lo[1])} at {lo[0]:.3f} s, max {_num(hi[1])} at {hi[0]:.3f} s"
        say(line)
        for t, v in pts:
            say(f"{t:.3f} {_num(v)}")
    if end:
        say(f"warning: {end}")
    return EXIT_OK


def _num(x: Any) -> str:
    """A value for people: a float32 (most log fields) to its 7 significant digits (12.6, not
    12.600000381469727), others to 10 (a latitude's 1e-7 degrees); --json has them exact."""
    if not isinstance(x, float) or not math.isfinite(x):
        return str(x)
    f32 = struct.unpack("<f", struct.pack("<f", x))[0] == x
    return f"{x:.7g}" if f32 else f"{x:.10g}"


def cmd_messages(a: argparse.Namespace) -> int:
    from ..logs import messages  # as _store

    path, log_id = _resolve(_store(), a.log)
    doc = messages(path, a.type, a.t0, a.t1, a.offset, a.limit)
    if a.json:
        return _json({"id": log_id, **doc})
    cols = [c for c in doc["fields"] if c != "TimeUS"]
    units = doc["units"]
    n = len(doc["messages"])
    say(
        f"{doc['type']} messages {doc['offset'] + 1}-{doc['offset'] + n} of {path}"
        if n
        else f"no {doc['type']} messages in this range"
    )
    known = [f"{c} {units[c]}" for c in cols if c in units]
    if n and known:
        say("units: " + ", ".join(known))
    for m in doc["messages"]:  # one line per message, as mavlogdump.py prints them
        say(f"{_t(m['time'])} {doc['type']} " + " ".join(f"{c}={_num(m.get(c))}" for c in cols))
    if doc["more"]:
        say(f"more: --offset {doc['offset'] + n} for the next page")
    end = _end_line(doc["end"] or {})
    if end:
        say(f"warning: {end}")
    return EXIT_OK


def cmd_compare(a: argparse.Namespace) -> int:
    from ..logs import compare  # as _store

    store = _store()
    (pa, ida), (pb, idb) = _resolve(store, a.a), _resolve(store, a.b)
    doc = compare(pa, pb)
    if a.json:
        return _json({"a_id": ida, "b_id": idb, **doc})
    say(f"A: {ida or ''} {pa}".replace("  ", " "))
    say(f"B: {idb or ''} {pb}".replace("  ", " "))
    differ = {d["what"] for d in doc["differences"]}

    def cell(x: Any) -> str:
        return ", ".join(map(str, x)) if isinstance(x, list) else str(x)

    rows = [
        [what, cell(x), cell(y), "DIFFERS" if what in differ else ""] for what, (x, y) in doc["side_by_side"].items()
    ]
    _console().print(_table("A and B side by side", ["", "A", "B", ""], rows))
    if doc["differences"]:
        say(f"{len(doc['differences'])} differences:")
        for d in doc["differences"]:
            say(f"  {d['text']}")
    else:
        say("no differences beyond the tolerances")
    return EXIT_OK


def _set_pin(a: argparse.Namespace, pinned: bool) -> int:
    store = _store()
    _resolve(store, a.log, ids_only=True)  # a kept log's id: a file is not the store's to pin
    rec = store.pin(a.log) if pinned else store.unpin(a.log)
    if a.json:
        return _json(rec.as_dict())
    say(
        f"{'pinned' if pinned else 'unpinned'} {rec.id} ({rec.path})" + (": kept whatever the budget" if pinned else "")
    )
    return EXIT_OK


def cmd_pin(a: argparse.Namespace) -> int:
    return _set_pin(a, True)


def cmd_unpin(a: argparse.Namespace) -> int:
    return _set_pin(a, False)


def cmd_prune(a: argparse.Namespace) -> int:
    store = _store()
    budget = store.budget_mb if a.budget_mb is None else a.budget_mb
    if a.dry_run:
        gone, before = store.prune_plan(budget)
        after = before - sum(r.size for r in gone)
    else:
        before = store.usage()
        gone = store.prune(budget)
        after = store.usage()
    if a.json:
        doc = {"store": str(store.root), "budget_mb": budget, "dry_run": a.dry_run, "usage_before": before}
        return _json(dict(doc, usage_after=after, deleted=[r.as_dict() for r in gone]))
    verb = "would delete" if a.dry_run else "deleted"
    if not gone:
        say(f"nothing to prune: {_mb(before)} kept in {store.root}, budget {budget:g} MB")
        return EXIT_OK
    say(f"{verb} {len(gone)} logs ({_mb(sum(r.size for r in gone))}); {_mb(after)} kept, budget {budget:g} MB")
    for r in gone:
        say(f"  {r.id} {_when(r.end or r.start)} {r.session or '-'} {r.label or ''} {r.path}".rstrip())
    return EXIT_OK


def cmd_path(a: argparse.Namespace) -> int:
    path, log_id = _resolve(_store(), a.log)
    full = os.path.abspath(path)
    if a.json:
        return _json({"id": log_id, "path": full})
    # the bare path for $(sitlpool logs path ID) (printable() would alter a real name); on a
    # terminal, without the escape sequences a planted record's path could hold
    print(full if not sys.stdout.isatty() else printable(full))
    return EXIT_OK


def cmd_picture(a: argparse.Namespace) -> int:
    from ..logs import picture  # as _store

    path, log_id = _resolve(_store(), a.log)
    png = picture(path, a.fields, a.t0, a.t1, title=a.title or "")
    out = Path(a.output)
    try:
        out.write_bytes(png)
    except OSError as e:
        err(f"cannot write the picture to {a.output}: {e.strerror or e}")
        return EXIT_ERROR
    if a.json:
        return _json({"id": log_id, "log": str(path), "output": str(out.resolve()), "bytes": len(png)})
    say(f"wrote {out} ({len(png)} bytes): {', '.join(a.fields)} of {path}")
    return EXIT_OK


def film_speed_arg(text: str) -> float:
    return _number(text, "speed", 0.1, 1000)


def cmd_film(a: argparse.Namespace) -> int:
    from ..logs.film import render_flight  # Pillow and the encoder: only `logs film` pays for them

    path, log_id = _resolve(_store(), a.log)
    fmt = "gif" if a.gif or a.output.lower().endswith(".gif") else "mp4"
    film = render_flight(path, a.output, fps=a.fps, speed=a.speed, format=fmt, t0=a.t0, t1=a.t1, title=a.title or "")
    if a.json:
        return _json({"id": log_id, "log": str(path), **film.as_dict(), "path": str(film.path.resolve())})
    say(
        f"wrote {film.path} ({film.size / 1e6:.1f} MB): {film.frames} frames at {film.fps} fps "
        f"({film.duration:.1f} s, x{film.speed:.3g}) of log time {film.t0:.1f}-{film.t1:.1f} s of {path}"
    )
    end = _end_line(film.end)
    if end:
        say(f"warning: {end}")
    return EXIT_OK


# ---- the parser ---------------------------------------------------------------------------------

LOG_HELP = "a kept log's id (sitlpool logs list) or a path to a DataFlash .BIN"


def _range(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="t0", type=seconds_arg, metavar="T0", help="log time (s since boot) to start at")
    p.add_argument("--to", dest="t1", type=seconds_arg, metavar="T1", help="log time (s since boot) to end at")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sitlpool logs`` and its subcommands on the CLI's subparsers."""
    lg = subparsers.add_parser(
        "logs",
        help="flight logs: list, show, fields, messages, compare, pin, unpin, prune, path, picture, film",
        description="Every flight's DataFlash log, kept under <data_dir>/logs/ within SITLPOOL_LOG_BUDGET_MB. "
        "LOG is a kept log's id or a path to any .BIN. Every subcommand takes --json.",
    )
    sub = lg.add_subparsers(dest="logs_command", required=True, metavar="SUBCOMMAND")

    def cmd(name: str, fn: Any, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(fn=fn)
        return p

    p = cmd("list", cmd_list, "kept logs, newest first")
    p.add_argument("--session", help="only this session's logs")
    p.add_argument("--label", help="only logs of sessions with this label")
    p.add_argument("--since", type=since_arg, help="only logs ended since: an age (30m, 2h, 7d) or a time")
    p.add_argument("--all", action="store_true", help=f"every match (default: the newest {LIST_DEFAULT})")
    p = cmd("show", cmd_show, "a log's summary: phases, modes, altitude, speeds, battery, events, messages")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p = cmd("fields", cmd_fields, "series of TYPE.Field names over log time, downsampled keeping peaks")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p.add_argument("fields", nargs="+", metavar="TYPE.Field", help="e.g. CTUN.Alt BAT.Volt GPS[1].Spd")
    _range(p)
    p.add_argument("--max-points", type=_int_arg("max-points", 2, 10000), default=500, metavar="N")
    p = cmd("messages", cmd_messages, "raw messages of one type, a page at a time")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p.add_argument("type", metavar="TYPE", help="a message type, e.g. MODE, MSG, GPS")
    _range(p)
    p.add_argument("--offset", type=_int_arg("offset", 0, 10**9), default=0, metavar="N")
    p.add_argument("--limit", type=_int_arg("limit", 1, 1000), default=100, metavar="N")
    p = cmd("compare", cmd_compare, "two logs' summaries side by side, the differences named")
    p.add_argument("a", metavar="A", help=LOG_HELP)
    p.add_argument("b", metavar="B", help=LOG_HELP)
    p = cmd("pin", cmd_pin, "keep a log whatever the budget")
    p.add_argument("log", metavar="ID", help="a kept log's id")
    p = cmd("unpin", cmd_unpin, "let the budget prune a log again")
    p.add_argument("log", metavar="ID", help="a kept log's id")
    p = cmd("prune", cmd_prune, "delete the oldest unpinned logs until the store fits the budget")
    p.add_argument("--budget-mb", type=budget_arg, metavar="N", help="default: SITLPOOL_LOG_BUDGET_MB (2000)")
    p.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    p = cmd("path", cmd_path, "the log's file (to open it in MAVExplorer)")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p = cmd("picture", cmd_picture, "a PNG of TYPE.Field names over log time, flight modes as bands")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p.add_argument("fields", nargs="+", metavar="TYPE.Field", help="at most 8, e.g. CTUN.Alt BAT.Volt")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the PNG to write")
    p.add_argument("--title", help="the picture's title")
    _range(p)
    p = cmd("film", cmd_film, "a film (MP4, or GIF) of the flight: the map and a HUD over time, for a bug report")
    p.add_argument("log", metavar="LOG", help=LOG_HELP)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the film to write (.mp4, or .gif)")
    p.add_argument("--gif", action="store_true", help="a GIF (Pillow) instead of an MP4 (H.264)")
    p.add_argument("--fps", type=_int_arg("fps", 1, 60), default=10, metavar="N", help="frames a second (10)")
    p.add_argument(
        "--speed",
        type=film_speed_arg,
        metavar="X",
        help="log seconds per film second (default: real time, faster beyond 2 minutes of film)",
    )
    p.add_argument("--title", help="the film's title")
    _range(p)
    return lg
