"""``sitlpool presets [--json]``: the presets sessions open with (``SITLPOOL_PRESETS``, or
``presets.toml`` in the data dir) and the named homes. ``add_parser(subparsers)`` registers it."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from .. import locations, presets
from ..config import load_settings
from ..errors import SitlpoolError
from ._common import EXIT_OK, say


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "presets",
        help="the presets sessions open with, and the named homes",
        description="Lists the presets of SITLPOOL_PRESETS (default <data_dir>/presets.toml): "
        "open_sitl(preset=NAME) takes one; and the named homes (ArduPilot's locations.txt names) that home= takes.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable: {file, presets: [...], homes: {...}}")
    p.set_defaults(fn=cmd_presets)
    return p


def _value(v) -> str:
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def cmd_presets(a) -> int:
    settings = load_settings()
    doc = presets.listing(settings)
    homes = locations.known(settings)
    if a.json:
        doc["homes"] = {k: v.as_dict() for k, v in sorted(homes.items())}
        say(json.dumps(doc, indent=2))
        return EXIT_OK
    if not doc["presets"]:
        say(f"no presets ({doc['file']} defines none; see docs/configure-sessions.md)")
    else:
        say(f"presets in {doc['file']}:")
    for p in doc["presets"]:
        say(f"  {p['name']}" + (f"  - {p['description']}" if p["description"] else ""))
        for k, v in p.items():
            if k not in ("name", "description", "source"):
                say(f"      {k} = {_value(v)}")
    sources = sorted({h.source for h in homes.values()})
    say(f"named homes ({', '.join(sources)}): {', '.join(sorted(homes))}")
    return EXIT_OK


# ---- a preset as a command line's pieces: sitlpool run --preset, sitlpool sim --preset -----------

FILES = "preset-files"


class PresetFiles:
    """A preset (``--preset NAME``) for a command sitlpool does not launch itself: ``values``
    are ``model``, ``home`` (coordinates), ``speedup`` and ``param_file``, one parameter file
    holding the preset's files' values then its params, written into
    ``<data_dir>/preset-files/<pid>-<start>/`` and removed by ``close()`` (a killed command's
    folder, e.g. a vehicle's that ended by SIGTERM, is removed by the next ``--preset``). Lua scripts are refused: SITL runs them from
    its own folder, which sitlpool does not choose here."""

    def __init__(self, name: str, command: str, settings=None):
        from .. import procinfo
        from ..process.paramfiles import launch_values

        settings = settings or load_settings()
        if presets.get(name, settings).values.get("scripts"):
            raise SitlpoolError(
                f"preset {name!r} runs Lua scripts, which {command} cannot place: SITL runs them from its own "
                "scripts/ folder; use open_sitl, sitlpool fly or the pytest plugin, or a preset without scripts"
            )
        o = presets.open_options(name, settings)  # read and checked: its files, its named home resolved
        values = launch_values([Path(f) for f in o.get("param_files") or []], o["params"] or {}, [])
        root = Path(settings.data_dir) / FILES
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for d in root.iterdir():  # the folders of commands that were killed
            who, _, ticks = d.name.partition("-")
            if who.isdigit() and ticks.isdigit() and not procinfo.is_alive(int(who), int(ticks)):
                shutil.rmtree(d, ignore_errors=True)
        me = os.getpid()
        self.dir = root / f"{me}-{procinfo.start_ticks(me) or 0}"
        self.dir.mkdir(exist_ok=True, mode=0o700)
        parm = self.dir / f"{name if name.isidentifier() else 'preset'}.parm"
        parm.write_text(
            f"# preset {name} ({presets.presets_file(settings)}): its files, then its params\n"
            + "".join(f"{k} {v:.9g}\n" for k, v in values.items())
        )
        self.values = {
            "model": str(o["model"]),
            "home": o["home"] or "",
            "speedup": f"{float(o['speedup']):g}",
            "param_file": str(parm),
        }

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def sim_args(args: list[str], files: PresetFiles) -> list[str]:
    """``sitlpool sim`` flags with the preset's under them (a flag given wins; its
    ``--defaults`` files come after the preset's file)."""
    out = list(args)
    given = {a.split("=", 1)[0] for a in args}
    v = files.values
    for flags, value in (
        (("--model", "-M"), v["model"]),
        (("--home", "-O"), v["home"]),
        (("--speedup", "-s"), v["speedup"]),
    ):
        if value and not given & set(flags):
            out += [flags[0], value]
    if "--defaults" in out:
        i = out.index("--defaults")
        if i + 1 < len(out):
            out[i + 1] = f"{v['param_file']},{out[i + 1]}"
    elif not any(a.startswith("--defaults=") for a in out):
        out += ["--defaults", v["param_file"]]
    else:
        i = next(i for i, a in enumerate(out) if a.startswith("--defaults="))
        out[i] = f"--defaults={v['param_file']},{out[i].split('=', 1)[1]}"
    return out
