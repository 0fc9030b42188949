"""Presets: named sets of ``open_sitl`` arguments in a TOML file (``SITLPOOL_PRESETS``, or
``presets.toml`` in the data dir), one table per preset::

    [windy-cmac]
    description = "CMAC with my airframe's tuning"
    model = "quad"
    home = "CMAC"                   # a name of locations.txt, or "lat,lon,alt,heading"
    speedup = 5
    param_files = ["my-frame.parm"]  # relative to the presets file
    params = { RTL_ALT = 1500 }
    scripts = ["hello.lua"]          # in SITLPOOL_SCRIPTS_DIR (real SITL only)

``open_options(preset, **given)`` gives the options ``Sessions.open`` takes: the preset's
values under the given ones (``params`` merged name by name, ``param_files`` and ``scripts``
the preset's first), named homes resolved, parameter files read and checked, scripts checked
against the allowlist. Every bad input is one ``ConfigError`` line; nothing is launched."""

from __future__ import annotations

import math
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from . import locations, pidfiles
from .config import load_settings
from .errors import ConfigError
from .process.binaries import resolve_binary
from .process.paramfiles import check_param_files, check_scripts

MAX_FILE_BYTES = 1_000_000
MAX_SPEEDUP = 1000.0  # as open_sitl (sessions.check_open_args)
#: what a preset may set, and the defaults of what neither the preset nor the caller gives
DEFAULTS: dict[str, Any] = {
    "model": "quad",
    "instance": None,
    "label": None,
    "speedup": 1.0,
    "home": None,
    "params": None,
    "param_files": None,
    "scripts": None,
    "wipe": True,
    "wait_s": 0,
}
KEYS = (*DEFAULTS, "description")


@dataclass
class Preset:
    name: str
    values: dict[str, Any]
    source: Path
    description: str = ""
    base: Path = field(default_factory=Path)  # where its relative paths start

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": str(self.source), **self.values}


def presets_file(settings=None) -> Path:
    settings = settings or load_settings()
    return settings.presets if settings.presets is not None else Path(settings.data_dir) / "presets.toml"


def load(settings=None) -> dict[str, Preset]:
    """Every preset of the presets file (none when the default file does not exist; a file
    named by ``SITLPOOL_PRESETS`` must exist). A bad file or entry raises ``ConfigError``."""
    settings = settings or load_settings()
    path = presets_file(settings)
    if not path.exists():
        if settings.presets is not None:
            raise ConfigError(f"SITLPOOL_PRESETS: presets file {path} does not exist")
        return {}
    data, st = pidfiles.read_user_file(path, MAX_FILE_BYTES, "presets file")
    if st.st_mode & stat.S_IWOTH:  # anyone could set this user's sessions' parameters and binary
        raise ConfigError(
            f"presets file {path} is writable by every user; a preset sets a session's parameters: chmod o-w {path}"
        )
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read presets file {path}: {getattr(e, 'strerror', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"presets file {path} is not TOML: {e}") from None
    out = {}
    for name, table in doc.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"presets file {path}: {name!r} is not a table; write each preset as [name] followed by its options"
            )
        wrong = [k for k in table if k not in KEYS]
        if wrong:
            raise ConfigError(
                f"presets file {path}, preset {name!r}: unknown option {', '.join(map(repr, wrong))}; "
                f"a preset sets {', '.join(KEYS)}"
            )
        values = {k: v for k, v in table.items() if k != "description"}
        desc = table.get("description", "")
        if not isinstance(desc, str):
            raise ConfigError(f"presets file {path}, preset {name!r}: description is not text")
        problem = next((m for k, v in values.items() if (m := _value_problem(k, v))), None)
        if problem:
            raise ConfigError(f"presets file {path}, preset {name!r}: {problem}")
        out[name] = Preset(name, values, path, desc, path.parent)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _numeric_text(v: Any) -> bool:  # open_sitl reads a parameter's value "1500" as 1500
    try:
        return isinstance(v, str) and math.isfinite(float(v))
    except ValueError:
        return False


def _value_problem(key: str, v: Any) -> str | None:
    """What is wrong with a preset's value for ``key`` (the kinds ``open_sitl`` takes), or None:
    a preset that cannot fly is refused when the file is read, not when a session launches."""
    if key in ("model", "label", "home"):
        ok = isinstance(v, str) and v.strip() != ""
        want = {
            "model": "a vehicle model such as 'quad'",
            "label": "a text",
            "home": "a location name or 'lat,lon,alt,heading'",
        }[key]
    elif key == "speedup":
        ok, want = _number(v) and 0 < v <= MAX_SPEEDUP, f"a number above 0 and at most {MAX_SPEEDUP:g}"
    elif key == "wait_s":
        ok, want = _number(v) and v >= 0, "seconds, a number of at least 0"
    elif key == "instance":
        ok, want = isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an instance number"
    elif key == "wipe":
        ok, want = isinstance(v, bool), "true or false"
    elif key == "params":
        ok = isinstance(v, Mapping) and all(_number(x) or _numeric_text(x) for x in v.values())
        want = "a table of parameter names and numbers, e.g. { RTL_ALT = 1500 }"
    elif key in ("param_files", "scripts"):
        ok = isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))
        want = "a path or a list of paths"
    else:
        return None
    return None if ok else f"{key} {str(v)[:60]!r} is not {want}"


def get(name: str, settings=None) -> Preset:
    """The preset ``name``; an unknown name raises ``ConfigError`` naming those that exist."""
    settings = settings or load_settings()
    if not isinstance(name, str) or not name:
        raise ConfigError(f"preset {name!r} is not a preset name")
    found = load(settings)
    if name in found:
        return found[name]
    close = get_close_matches(name, list(found), n=3, cutoff=0.5)
    where = presets_file(settings)
    if not found:
        raise ConfigError(f"unknown preset {name[:60]!r}: there are no presets ({where} does not define any)")
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ConfigError(f"unknown preset {name[:60]!r}: {hint}presets in {where}: {', '.join(sorted(found))}")


def listing(settings=None) -> dict:
    """The presets as ``list_presets`` and ``sitlpool presets --json`` answer."""
    settings = settings or load_settings()
    found = load(settings)
    return {"file": str(presets_file(settings)), "presets": [p.as_dict() for p in found.values()]}


def _paths(value, what: str) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigError(f"{what} {str(value)[:60]!r} is not a list of paths")


def merge(preset: str | None, settings=None, **given) -> dict:
    """``given`` over the preset's values, keeping only the options one of them sets (a value
    of None counts as not given; options a preset cannot set pass through as given): ``params``
    merged name by name, ``param_files`` and ``scripts`` the preset's first (its relative files
    from the presets file's folder, read and checked). For launchers that fill in their own
    defaults (the pytest plugin, the CLI, fleets); homes, scripts and values are theirs to check."""
    settings = settings or load_settings()
    p = get(preset, settings) if preset is not None and preset != "" else None
    base = dict(p.values) if p else {}
    out = {k: v for k, v in base.items() if k not in ("params", "param_files", "scripts")}
    out.update({k: v for k, v in given.items() if v is not None and k not in ("params", "param_files", "scripts")})
    where = f"preset {p.name!r}: " if p else ""
    mine = base.get("params")
    if mine is not None and not isinstance(mine, Mapping):
        raise ConfigError(
            f"{where}params {str(mine)[:60]!r} is not a mapping of names to values, e.g. {{RTL_ALT = 1500}}"
        )
    theirs = given.get("params")
    if mine or theirs:
        if theirs is not None and not isinstance(theirs, Mapping):
            out["params"] = theirs  # the launcher says what is wrong with it
        else:
            out["params"] = {str(k).upper(): v for src in (mine or {}, theirs or {}) for k, v in src.items()}
    files = _paths(base.get("param_files"), f"{where}param_files")
    files = [str(f) for f in check_param_files(files, p.base)] if p and files else []
    files += _paths(given.get("param_files"), "param_files")
    if files:
        out["param_files"] = files
    scripts = _paths(base.get("scripts"), f"{where}scripts") + _paths(given.get("scripts"), "scripts")
    if scripts:
        out["scripts"] = scripts
    return out


def open_options(preset: str | None = None, settings=None, **given) -> dict:
    """The options ``Sessions.open`` takes, from a preset (or none) and ``given`` (a value of
    None counts as not given): ``model, instance, label, speedup, home, params, wipe, wait_s,
    param_files, scripts`` (the last two only when there are any). The preset's values lie under the given ones; ``params`` merge
    name by name; ``param_files`` and ``scripts`` are the preset's, then the given ones.
    Homes named (``CMAC``) are resolved to coordinates; files and scripts are checked."""
    settings = settings or load_settings()
    wrong = [k for k in given if k not in DEFAULTS]
    if wrong:
        raise ConfigError(f"unknown option {', '.join(map(repr, wrong))}; sessions take {', '.join(DEFAULTS)}")
    p = get(preset, settings) if preset is not None and preset != "" else None
    base = dict(p.values) if p else {}
    out: dict[str, Any] = {}
    for k, default in DEFAULTS.items():
        mine = given.get(k)
        out[k] = mine if mine is not None else base.get(k, default)
    where = f"preset {p.name!r}: " if p else ""
    # params: the preset's, then the given ones, name by name
    for src in (base.get("params"), given.get("params")):
        if src is not None and not isinstance(src, Mapping):
            raise ConfigError(
                f"{where if src is base.get('params') else ''}params {str(src)[:60]!r} is not a mapping of "
                "names to values, e.g. {'RTL_ALT': 1500}"
            )
    merged = {**{str(k).upper(): v for k, v in (base.get("params") or {}).items()}}
    merged.update({str(k).upper(): v for k, v in (given.get("params") or {}).items()})
    for k, v in merged.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ConfigError(f"parameter {k}: {v!r} is not a number")
    out["params"] = merged or None
    files = check_param_files(_paths(base.get("param_files"), f"{where}param_files"), p.base if p else None)
    files += check_param_files(_paths(given.get("param_files"), "param_files"))
    out["param_files"] = [str(f) for f in files] or None
    scripts = _paths(base.get("scripts"), f"{where}scripts") + _paths(given.get("scripts"), "scripts")
    model = out["model"]
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where}model {model!r} is not a vehicle model; give a name such as 'quad' or 'plane'")
    binary = resolve_binary(settings, model) if scripts else None
    out["scripts"] = [str(s) for s in check_scripts(scripts, settings, binary)] or None
    try:
        out["home"] = locations.resolve_home(out["home"], settings)
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None
    for k in ("param_files", "scripts"):  # left out unless used: any Sessions.open takes the rest
        if out[k] is None:
            del out[k]
    return out
