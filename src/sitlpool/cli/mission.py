"""``sitlpool mission check | convert | upload | download | clear``: the mission files people
bring (``.waypoints`` QGC WPL 110, QGroundControl ``.plan``, the items JSON), for people.

The files are read and written by ``sitlpool.mavlink.missionfiles`` and checked by
``mission_items.what_to_send`` (what ``upload_mission`` checks before it sends anything), and
the vehicle is spoken to by ``sitlpool.mavlink.mission`` over a link attached as ``sitlpool
attach`` attaches: no second copy of either. Reading (check, convert, download) is always
allowed; writing a vehicle's mission (upload, clear) follows the rule of control
(``attach_sitl(control=True)``, ``sitlpool watch --control``): an instance someone else leases
is refused, naming the holder, unless ``--force`` (a warning on stderr); the holder is this process or one
of its parents (``sitlpool run -- sh -c '... sitlpool mission upload F {instance}'``).
pymavlink is imported by the handlers only. ``add_parser(subparsers)`` registers the command.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import ConfigError
from ..pidfiles import read_user_file
from ..process import UnmanagedManager
from ._common import EXIT_OK, err, held_by_another, plain, say, target_arg, timeout_arg

FORMATS = ("waypoints", "plan", "items")
WAYPOINTS_SUFFIXES = (".waypoints", ".txt", ".mission", ".wp")
MAX_FILE_BYTES = 4_000_000  # missionfiles.MAX_FILE_CHARS (not imported at start-up: pymavlink)
# the messages of a file's items are built without a vehicle: only their system id is read
_OFFLINE = SimpleNamespace(vehicle=SimpleNamespace(sysid=1, home=None))
FILE_HELP = ".waypoints (QGC WPL 110), .plan (QGroundControl) or items JSON"


def add_parser(sub) -> argparse.ArgumentParser:
    m = sub.add_parser(
        "mission",
        help="check, convert, upload, download and clear mission files (.waypoints, .plan, items JSON)",
        description="The mission files people bring: .waypoints (QGC WPL 110, as Mission Planner and MAVProxy "
        "save them; MAVProxy's fence and rally files too), QGroundControl .plan (mission, geofence, rally points) "
        "and the items JSON of download_mission. TARGET is an instance number or tcp:HOST:PORT, as for "
        "'sitlpool attach'. Reading is always allowed; upload and clear are refused on an instance someone else "
        "leases (--force overrides, with a warning).",
    )
    s = m.add_subparsers(dest="mission_command", required=True, metavar="check|convert|upload|download|clear")
    c = s.add_parser("check", help="read a file as upload would: its items, fence, rally points and commands")
    c.add_argument("file", metavar="FILE", help=FILE_HELP)
    c.add_argument("--json", action="store_true", help="machine-readable")
    c.set_defaults(fn=cmd_check)
    v = s.add_parser("convert", help="write a file in another format, as download_mission writes it")
    v.add_argument("file", metavar="FILE", help=FILE_HELP)
    v.add_argument("--to", required=True, choices=FORMATS, help="the format to write")
    _like(v)
    v.add_argument("-o", "--output", metavar="OUT", help="write to OUT (default: standard output)")
    v.set_defaults(fn=cmd_convert)
    u = s.add_parser("upload", help="upload a file to a vehicle (all or nothing: a failure puts back its lists)")
    u.add_argument("file", metavar="FILE", help=FILE_HELP)
    u.add_argument("target", type=target_arg, metavar="TARGET", help="instance number or tcp:HOST:PORT")
    u.add_argument("--fence", metavar="FILE", help="also a fence: MAVProxy's fence file, or JSON shapes")
    u.add_argument("--rally", metavar="FILE", help="also rally points: MAVProxy's rally file, or JSON points")
    _writer_options(u)
    u.set_defaults(fn=cmd_upload)
    d = s.add_parser("download", help="a vehicle's mission as a file (read-only)")
    d.add_argument("target", type=target_arg, metavar="TARGET", help="instance number or tcp:HOST:PORT")
    d.add_argument("--format", choices=FORMATS, default="waypoints", help="default waypoints")
    _like(d)
    d.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: standard output)")
    d.add_argument("--timeout", type=timeout_arg, default=10, metavar="SECONDS", help="to find the vehicle")
    d.set_defaults(fn=cmd_download)
    x = s.add_parser("clear", help="remove a vehicle's mission (--fence, --rally: those too)")
    x.add_argument("target", type=target_arg, metavar="TARGET", help="instance number or tcp:HOST:PORT")
    x.add_argument("--fence", action="store_true", help="also clear the fence")
    x.add_argument("--rally", action="store_true", help="also clear the rally points")
    _writer_options(x)
    x.set_defaults(fn=cmd_clear)
    return m


def _like(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--like",
        metavar="FILE",
        help="write as FILE was written (MAVProxy's or Mission Planner's .waypoints, a .plan's speeds); "
        "default: Mission Planner's .waypoints, QGroundControl's .plan",
    )


def _writer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="even though someone else leases the instance (a warning)")
    p.add_argument("--timeout", type=timeout_arg, default=10, metavar="SECONDS", help="to find the vehicle")


# ---- reading a file -----------------------------------------------------------------------------


@dataclass
class Loaded:
    """A file read and checked as an upload checks it: ``upload`` holds ``mission.upload``'s
    arguments, ``file`` the same lists as a file's items (home, mission, fence, rally)."""

    name: str
    kind: str  # "waypoints", "plan", "items"
    upload: dict
    file: Any  # missionfiles.MissionFile


def _read_text(path: str, what: str = "mission file") -> str:
    data, _ = read_user_file(Path(path), MAX_FILE_BYTES, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not text (UTF-8): byte {e.start} is {data[e.start]:#04x}") from None


def _kind(path: str, text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".plan":
        return "plan"
    if suffix in WAYPOINTS_SUFFIXES or text.lstrip().startswith("QGC WPL"):
        return "waypoints"
    if suffix == ".json" or text.lstrip()[:1] in ("{", "["):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return "items"  # the items reader says what is wrong
        return "plan" if isinstance(doc, dict) and "fileType" in doc else "items"
    raise ConfigError(
        f"{path} is neither a .waypoints file (its first line 'QGC WPL 110'), a QGroundControl .plan nor an "
        "items JSON file; give one of those (a .waypoints or .plan name says which)"
    )


def load(path: str) -> Loaded:
    """``path`` read, and checked whole as ``upload_mission`` checks it before sending anything:
    one line naming the file (and its line or item) when something is wrong."""
    from ..mavlink import missionfiles as mf  # pymavlink: only the mission commands load it
    from ..mavlink.mission_items import what_to_send

    text = _read_text(path)
    kind = _kind(path, text)
    if kind == "waypoints":
        f = mf.read_waypoints(text, path)
        key = "fence" if f.fence is not None else "rally" if f.rally is not None else "waypoints"
        up = {key: text}
    elif kind == "plan":
        f = mf.read_plan(text, path)
        up = {"plan": text}
    else:
        f, up = _read_items(text, path)
    try:
        what_to_send(up.get("items"), up.get("waypoints"), up.get("plan"), up.get("fence"), up.get("rally"))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return Loaded(path, kind, up, f)


ITEMS_KEYS = ("items", "home", "count", "fence", "rally")


def _read_items(text: str, path: str):
    """An items JSON file: a list of records, or ``download_mission(format="items")``'s object
    (``items``, ``home``, and ``fence``/``rally`` when it carries them)."""
    from ..mavlink import missionfiles as mf
    from ..mavlink.mission_items import MAX_ITEMS, check_items, file_item_of, item_message
    from ..mavlink.wire import number

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ConfigError(f"{path} is nested too deeply to be a mission") from None
    if isinstance(doc, list):
        doc = {"items": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("items", []), list):
        raise ConfigError(
            f'{path}: an items file is a list of records such as {{"command": "takeoff", "alt_m": 10}}, '
            "or an object with 'items' (as download_mission writes it)"
        )
    if not set(doc) & {"items", "fence", "rally"}:
        raise ConfigError(f"{path} holds no 'items', 'fence' or 'rally': nothing to upload")
    extra = sorted(set(doc) - set(ITEMS_KEYS))
    if extra:
        raise ConfigError(f"{path}: key {extra[0]!r} does not belong to an items file ({', '.join(ITEMS_KEYS)})")
    records = doc.get("items", [])
    if len(records) > MAX_ITEMS:  # before each is read (100,000 items is not a mission)
        raise ConfigError(
            f"{path}: a mission of {len(records)} items is too long; ArduPilot stores at most {MAX_ITEMS}"
        )
    try:
        checked = check_items(records) if records else []
        fence = mf.fence_items(doc["fence"]) if doc.get("fence") is not None else None
        rally = mf.rally_items(doc["rally"]) if doc.get("rally") is not None else None
        home = None
        h = doc.get("home")
        if h is not None:
            if not isinstance(h, dict):
                raise ConfigError(f"home is {h!r}; it needs {{'lat', 'lon', 'alt_m'}}")
            lat, lon, alt = (number(h.get(k), f"home's {k!r}") for k in ("lat", "lon", "alt_m"))
            home = mf.Item(16, 0, (0.0, 0.0, 0.0, 0.0), lat, lon, alt)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    items = [file_item_of(item_message(_OFFLINE, i, r)) for i, r in enumerate(checked, start=1)]
    up: dict = {"fence": doc.get("fence"), "rally": doc.get("rally")}
    if checked:
        up["items"] = checked
    elif "items" in doc:  # an empty mission: uploaded as one (the records form takes none)
        up["waypoints"] = mf.write_waypoints(home or mf.Item(16), [])
    return mf.MissionFile(home, items, fence, rally), {k: v for k, v in up.items() if v is not None}


def _style(like: str | None, loaded: Loaded | None = None) -> dict:
    """How to write: as ``--like`` FILE was written, else as the file being converted was."""
    if like is not None:
        return load(like).file.style
    return loaded.file.style if loaded is not None else {}


# ---- writing ------------------------------------------------------------------------------------


def records(f) -> dict:
    """A file's lists as ``download_mission(format="items")`` gives them (the records the
    vehicle would give back, home; fence shapes and rally points when the file has them)."""
    from ..mavlink import missionfiles as mf
    from ..mavlink.link import A
    from ..mavlink.mission_items import file_item_message, record_of

    mtype = A.MAV_MISSION_TYPE_MISSION
    its = [record_of(file_item_message(_OFFLINE, i, it, mtype)) for i, it in enumerate(f.items, start=1)]
    home = None if f.home is None else {"lat": f.home.x, "lon": f.home.y, "alt_m": f.home.z}
    out: dict = {"count": len(its), "items": its, "home": home}
    if f.fence is not None:
        out["fence"] = mf.fence_shapes(f.fence)
    if f.rally is not None:
        out["rally"] = mf.rally_points(f.rally)
    return out


def items_json(doc: dict) -> str:
    """The items form as JSON: a NaN parameter (QGroundControl's null, "unchanged") as null."""
    return json.dumps(plain(doc), indent=2) + "\n"


def convert(loaded: Loaded, to: str, style: dict) -> str:
    """``loaded`` as the text of a ``to`` file, written as ``download_mission`` writes it."""
    from ..mavlink import missionfiles as mf

    f = loaded.file
    if to == "items":
        return items_json(records(f))
    if to == "plan":
        return mf.write_plan(f.home, f.items, f.fence or [], f.rally or [], style)
    mission_given = f.home is not None or f.items or (f.fence is None and f.rally is None)
    if not mission_given:  # MAVProxy's fence or rally file: one list, no home
        return mf.write_waypoints(None, f.fence or f.rally or [], "mavproxy", style.get("newline"))
    left = [f"the fence ({len(f.fence)} items)"] if f.fence else []
    left += [f"{len(f.rally)} rally points"] if f.rally else []
    if left:
        err(
            f"note: a .waypoints file holds the mission only: {' and '.join(left)} of {loaded.name} left out "
            "(--to plan or --to items keeps them)"
        )
    return mf.write_waypoints(f.home or mf.Item(16), f.items, style.get("wpl", "missionplanner"), style.get("newline"))


def write_out(path: str | None, text: str) -> None:
    """``text`` to ``path`` as it is (CRLF kept), whole or not at all; standard output without one.
    A symlink is written through (its target replaced, the link kept); a FIFO or a device
    (``/dev/null``, ``/dev/stdout``) is written into as a shell redirection does, never replaced."""
    if path is None:
        print(text, end="", flush=True)
        return
    if not path or path.endswith(os.sep):
        raise ConfigError(f"cannot write {path!r}: give a file name (-o OUT)")
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"cannot write {path}: it is a directory; give a file name in it")
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):  # a FIFO, a device: written into, as `>` does
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            return
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None
    p = Path(os.path.realpath(path))  # a symlink: its target replaced, the link kept
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None


# ---- check / convert ----------------------------------------------------------------------------


def summary(loaded: Loaded) -> dict:
    from ..mavlink import missionfiles as mf
    from ..mavlink.link import A

    f = loaded.file

    def name(cmd: int) -> str:
        e = A.enums["MAV_CMD"].get(cmd)
        return e.name.removeprefix("MAV_CMD_") if e else str(cmd)

    shapes = mf.fence_shapes(f.fence) if f.fence is not None else None
    has_mission = any(k in loaded.upload for k in ("items", "waypoints", "plan"))
    out: dict = {
        "file": loaded.name,
        "format": loaded.kind,
        "mission_items": len(f.items) if has_mission else None,
        "home": None if f.home is None else {"lat": f.home.x, "lon": f.home.y, "alt_m": f.home.z},
        "commands": dict(Counter(name(it.command) for it in f.items)),
        "fence_items": None if f.fence is None else len(f.fence),
        "fence_shapes": None if shapes is None else dict(Counter(next(iter(s)) for s in shapes)),
        "rally_points": None if f.rally is None else len(f.rally),
    }
    if loaded.kind == "waypoints":
        out["written_like"] = f.style.get("wpl")
    return out


def cmd_check(a: argparse.Namespace) -> int:
    s = summary(load(a.file))
    if a.json:
        print(json.dumps(s, indent=2))
        return EXIT_OK
    what = {"waypoints": "a .waypoints file", "plan": "a QGroundControl .plan", "items": "an items JSON file"}
    like = {"missionplanner": " (Mission Planner's)", "mavproxy": " (MAVProxy's)"}.get(s.get("written_like") or "", "")
    lists = [f"{s['mission_items']} mission items"] if s["mission_items"] is not None else []
    if s["fence_items"] is not None:
        kinds = ", ".join(f"{n} {k.replace('_', ' ')}{'s' if n > 1 else ''}" for k, n in s["fence_shapes"].items())
        lists.append(f"fence {s['fence_items']} items" + (f" ({kinds})" if kinds else ""))
    if s["rally_points"] is not None:
        lists.append(f"{s['rally_points']} rally points")
    say(f"{a.file}: {what[s['format']]}{like}: {', '.join(lists)}; ready to upload")
    h = s["home"]
    if h is not None:
        say(f"  home {h['lat']:.7f}, {h['lon']:.7f}, {h['alt_m']:g} m (the vehicle keeps its own)")
    if s["commands"]:
        say("  commands: " + ", ".join(k if n == 1 else f"{k} x{n}" for k, n in s["commands"].items()))
    return EXIT_OK


def cmd_convert(a: argparse.Namespace) -> int:
    loaded = load(a.file)
    style = _style(a.like, loaded if loaded.kind == a.to else None)
    write_out(a.output, convert(loaded, a.to, style))
    return EXIT_OK


# ---- on a vehicle -------------------------------------------------------------------------------


def check_writer(target: dict, force: bool, what: str) -> None:
    """The rule of control: ``what`` (an upload, a clear) on an instance someone else leases is
    refused, naming the holder, unless ``force`` (a warning on stderr). The holder is this process or one of
    its parents (``sitlpool run`` holds the lease of the command it runs)."""
    other = held_by_another(target.get("instance"), target.get("endpoint"))
    if other is None:
        return
    n, h = other
    if not force:
        raise ConfigError(
            f"instance {n} is leased to {h.describe()}: {what} would change its vehicle's mission; "
            "download it (always allowed), ask its holder, or pass --force if you must"
        )
    err(f"warning: {what} forced while {h.describe()} holds instance {n}")


def _attached(target: dict, timeout: float, control: bool):
    """A link to ``target`` as ``sitlpool attach`` makes one (a free serial port; the SITL left running)."""
    t = dict(target)
    t.pop("text")
    waiting = logging.getLogger("sitlpool.unmanaged")
    level = waiting.level
    waiting.setLevel(logging.ERROR)  # its "waiting for" lines: a failure says the same, in one line
    try:
        return UnmanagedManager().start("mission", timeout=timeout, control=control, **t)
    finally:
        waiting.setLevel(level)


def _lists(r: dict) -> str:
    out = [f"{r['uploaded']} mission items"] if "uploaded" in r else []
    out += [f"fence {r['fence_items']} items"] if "fence_items" in r else []
    out += [f"{r['rally_points']} rally points"] if "rally_points" in r else []
    return ", ".join(out)


def cmd_upload(a: argparse.Namespace) -> int:
    from ..mavlink import mission

    loaded = load(a.file)
    up = dict(loaded.upload)
    for key in ("fence", "rally"):  # checked whole, with the file, before the vehicle is touched
        extra = getattr(a, key)
        if extra is None:
            continue
        if key in up or getattr(loaded.file, key) is not None:
            raise ConfigError(f"{a.file} has its own {key}: give it in the file or with --{key}, not both")
        up[key] = _extra_list(extra, key)
    if "fence" in up or "rally" in up:
        from ..mavlink.mission_items import what_to_send

        try:
            what_to_send(up.get("items"), up.get("waypoints"), up.get("plan"), up.get("fence"), up.get("rally"))
        except ConfigError as e:
            given = " and ".join(f"--{k} {getattr(a, k)}" for k in ("fence", "rally") if getattr(a, k))
            raise ConfigError(f"{given}: {e}") from None
    check_writer(a.target, a.force, "an upload")
    h = _attached(a.target, a.timeout, control=True)
    try:
        r = mission.upload(h.link, **up)
    finally:
        h.kill(wait=True)
    say(f"uploaded {a.file} to {a.target['text']}: {_lists(r)}")
    if r.get("warning"):
        err(f"warning: {r['warning']}")
    return EXIT_OK


def _extra_list(path: str, key: str):
    """``--fence``/``--rally`` FILE: MAVProxy's file (its text), or JSON shapes / points."""
    text = _read_text(path, f"the --{key} file")
    if text.lstrip().startswith("QGC WPL"):
        return text
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(
            f"the --{key} file {path} is neither MAVProxy's {key} file (QGC WPL 110) nor JSON ({e})"
        ) from None


def cmd_download(a: argparse.Namespace) -> int:
    from ..mavlink import mission

    style = _style(a.like)  # checked before the vehicle is asked
    h = _attached(a.target, a.timeout, control=False)
    try:
        if a.format == "items":
            text = items_json(mission.download(h.link, "items", fence=True, rally=True))
        else:
            text = mission.download(h.link, a.format, style=style)["text"]  # written as --like's file was
    finally:
        h.kill(wait=True)
    write_out(a.output, text)
    return EXIT_OK


def cmd_clear(a: argparse.Namespace) -> int:
    from ..mavlink import mission

    check_writer(a.target, a.force, "clearing the mission")
    h = _attached(a.target, a.timeout, control=True)
    try:
        mission.clear(h.link)
        if a.fence or a.rally:
            mission.upload(h.link, fence=[] if a.fence else None, rally=[] if a.rally else None)
    finally:
        h.kill(wait=True)
    also = " and ".join(k for k, on in (("fence", a.fence), ("rally points", a.rally)) if on)
    say(f"cleared the mission{' and the ' + also if also else ''} of {a.target['text']}")
    return EXIT_OK
