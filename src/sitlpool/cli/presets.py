"""``sitlpool presets [--json]``: the presets sessions open with (``SITLPOOL_PRESETS``, or
``presets.toml`` in the data dir) and the named homes. ``add_parser(subparsers)`` registers it."""

from __future__ import annotations

import argparse
import json

from .. import locations, presets
from ..config import load_settings
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
