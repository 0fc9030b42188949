"""A launch's options on the driver (``launch_options``: a preset resolved here, wind as its
parameters), and the files of its configuration (parameter files, Lua scripts), carried to the node
by content: read and checked on the driver (a garbage line names the driver's file and line,
before anything is placed), written on the node into ``<data_dir>/fleet-files/<pid>-<start>/``
of the actor that launches with them, and removed with it (a killed actor's folder is swept by
the next actor of that node)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import locations, presets, procinfo
from ..errors import ConfigError, SitlpoolError
from ..process.paramfiles import check_param_files, check_scripts
from ..world import wind_option

FOLDER = "fleet-files"
#: ``Fleet.open``'s and ``map``'s model when none is given (the preset's, else quad); None is refused
DEFAULT_MODEL: Any = type("DefaultModel", (), {"__repr__": lambda self: "'quad'"})()
SCRIPTS = "scripts"


@dataclass
class Packed:
    """What travels with the call: ``(name on the driver, bytes)`` per file."""

    param_files: list[tuple[str, bytes]] = field(default_factory=list)
    scripts: list[tuple[str, bytes]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.param_files or self.scripts)


def pack(param_files=None, scripts=None, settings=None) -> Packed:
    """Parameter files (paths on this machine) and Lua scripts (names in this machine's
    ``SITLPOOL_SCRIPTS_DIR``), read and checked here; whether the node's SITL runs Lua is the
    node's to say."""
    out = Packed()
    for p in check_param_files(param_files):
        out.param_files.append((str(p), p.read_bytes()))
    if scripts:
        if settings is None:
            from ..config import load_settings  # pydantic-settings: only when scripts travel

            settings = load_settings()
        # the node's binary says whether it runs Lua; here only the allowlist and the files are checked
        for p in check_scripts(scripts, settings, binary="a node's SITL"):
            out.scripts.append((p.name, p.read_bytes()))
    return out


class NodeFiles:
    """The folder of one actor's files on its node; ``write`` puts a ``Packed`` in it."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / FOLDER
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        sweep(self.root)
        pid = os.getpid()
        self.dir = self.root / f"{pid}-{procinfo.start_ticks(pid) or 0}"
        shutil.rmtree(self.dir, ignore_errors=True)  # a reused pid's leftovers
        self.dir.mkdir(mode=0o700)
        self.names: dict[str, str] = {}  # path here -> the name it had on the driver

    def write(self, packed: Packed) -> tuple[list[str], list[str]]:
        """``(param file paths, script names)`` here; the scripts in ``<dir>/scripts``."""
        files = []
        for i, (name, data) in enumerate(packed.param_files):
            p = self.dir / f"{i}-{Path(name).name}"
            p.write_bytes(data)
            files.append(str(p))
            self.names[str(p)] = name
        scripts = []
        if packed.scripts:
            (self.dir / SCRIPTS).mkdir()
            for name, data in packed.scripts:
                if Path(name).name != name or name.startswith("."):
                    raise ConfigError(f"script name {name!r} is not a file name")
                (self.dir / SCRIPTS / name).write_bytes(data)
                scripts.append(name)
        return files, scripts

    @property
    def scripts_dir(self) -> Path:
        return self.dir / SCRIPTS

    def driver_names(self, text: str) -> str:
        """``text`` (a config document's paths, an error message) with the driver's names."""
        for here, there in self.names.items():
            text = text.replace(here, there)
        return text

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def sweep(root: Path) -> None:
    """Remove the folders of actors that are gone (killed before they could remove their own)."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for d in entries:
        pid, _, ticks = d.name.partition("-")
        if not (pid.isdigit() and ticks.isdigit()):
            continue
        if not procinfo.is_alive(int(pid), int(ticks) or None):
            shutil.rmtree(d, ignore_errors=True)


def launch_options(preset, model, speedup, params, home, label, wipe, param_files, scripts, wind) -> dict:
    """A launch's options on the driver: the preset (of this machine) under the given ones,
    ``wind`` as its ``SIM_WIND_*`` parameters, parameter files and scripts read here to travel
    by content (``files``); every bad input one line before anything is placed."""
    default_model = model is DEFAULT_MODEL
    given = dict(model=None if default_model else model, speedup=speedup, params=params, home=home, label=label)
    given["wipe"] = wipe
    settings = None
    if preset is not None or scripts:
        from ..config import load_settings  # pydantic-settings: only for a preset or scripts

        settings = load_settings()
    if preset is not None:
        o = presets.merge(preset, settings, **given, param_files=param_files, scripts=scripts)
        if o.get("instance") is not None:
            raise SitlpoolError(
                f"preset {preset!r} sets instance {o['instance']}: a cluster places SITLs where there is room; "
                "use a preset without instance"
            )
        param_files, scripts = o.get("param_files"), o.get("scripts")
        given.update({k: o.get(k) for k in given})
    model = given["model"] if given["model"] is not None or not default_model else "quad"  # None: refused
    out = {"model": model, "speedup": given["speedup"]}  # speedup None: the launcher's default
    home = given["home"]
    if isinstance(home, str) and "," not in home and home.strip():  # a named home (CMAC): this machine's names
        if settings is None:
            from ..config import load_settings  # pydantic-settings: only for a named home

            settings = load_settings()
        home = locations.resolve_home(home, settings)
    out.update(label=given["label"], home=home, wipe=True if given["wipe"] is None else given["wipe"])
    out["params"] = given["params"]
    out["wind"] = None
    if wind is not None:
        values = wind_option(wind)
        both = dict(out["params"] or {}) if isinstance(out["params"], Mapping) else out["params"]
        if isinstance(both, dict):
            clash = sorted(k for k in values if k in {str(p).upper() for p in both})
            if clash:
                raise SitlpoolError(f"wind and params both set {', '.join(clash)}; give one")
            both.update(values)
        out["params"], out["wind"] = both, values
    out["files"] = pack(param_files, scripts, settings)
    return out
