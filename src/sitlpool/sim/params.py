"""The simulated copter's parameters: defaults, ``--defaults`` files and ``eeprom.bin``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .params47 import TABLE


def _table() -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    for line in TABLE.splitlines():
        name, ptype, value = line.split()
        out[name] = (float(value), int(ptype))
    return out


# name -> (value, MAV_PARAM_TYPE: 2=INT8 4=INT16 6=INT32 9=REAL32), in ArduCopter 4.7's index order
DEFAULTS: dict[str, tuple[float, int]] = _table()
SYSID = "MAV_SYSID"  # SYSID_THISMAV before 4.7


def parse_parm_file(path: Path) -> dict[str, float]:
    """``NAME VALUE`` or ``NAME,VALUE`` lines; ``#`` comments. Raises ValueError naming the line."""
    out: dict[str, float] = {}
    for i, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").replace("\t", " ").split()
        if len(parts) < 2:
            raise ValueError(f"{path}:{i}: expected 'NAME VALUE', got {raw.strip()!r}")
        try:
            out[parts[0].upper()] = float(parts[1])
        except ValueError:
            raise ValueError(f"{path}:{i}: {parts[1]!r} is not a number") from None
    return out


class Params:
    """Name -> value, in ArduCopter's order, persisted with the mission as JSON in ``eeprom.bin``
    (``{"params": {...}, "mission": [...]}``), so both survive a reboot as on the real board."""

    def __init__(self, eeprom: Path, defaults_files: list[Path], wipe: bool, sysid: int | None, speedup: float):
        self.eeprom = eeprom
        self.types = {k: t for k, (_, t) in DEFAULTS.items()}
        values = {k: float(v) for k, (v, _) in DEFAULTS.items()}
        for f in defaults_files:
            for k, v in parse_parm_file(f).items():
                if k in values:  # ArduPilot ignores names it does not have (copter.parm's ARSPD_*)
                    values[k] = v
        self.mission: list[list[float]] = []
        self.unsaved: dict[str, float] = {}  # name -> value in eeprom.bin, for values set in RAM only
        if not wipe and eeprom.exists():
            try:
                saved = json.loads(eeprom.read_text() or "{}")
                if "params" in saved:
                    self.mission = [list(map(float, it)) for it in saved.get("mission", [])]
                    saved = saved["params"]
                for k, v in saved.items():
                    if k in values:
                        values[k] = float(v)
            except (ValueError, AttributeError, TypeError):
                pass  # a damaged eeprom is like a wiped one, as on the real board
        if sysid is not None:
            values[SYSID] = float(sysid)
        values["SIM_SPEEDUP"] = float(speedup)
        self.values = values
        self.names = list(values)
        self.index = {k: i for i, k in enumerate(self.names)}
        self.save()

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def get(self, name: str, default: float = 0.0) -> float:
        return self.values.get(name, default)

    def set(self, name: str, value: float, save: bool = True) -> bool:
        if name not in self.values:
            return False
        if self.types[name] != 9:
            value = float(int(round(value)))
        self.values[name] = float(value)
        if save:
            self.unsaved.pop(name, None)
            self.save()
        return True

    def set_in_ram(self, values: dict[str, float]) -> None:
        """Values that change now but are not written to eeprom.bin (what a REQUEST_DATA_STREAM
        does to the MAVn_* rates on ArduPilot): a reboot brings back the saved ones."""
        for name, value in values.items():
            if name in self.values:
                self.unsaved.setdefault(name, self.values[name])
                self.set(name, value, save=False)

    def update(self, values: dict[str, float]) -> None:
        """Several values the vehicle sets itself, saved once."""
        for name, value in values.items():
            self.set(name, value, save=False)
        self.save()

    def save_mission(self, items: list[list[float]]) -> None:
        self.mission = items
        self.set("MIS_TOTAL", len(items))  # ArduPilot's count of stored items, home included

    def save(self) -> None:
        tmp = self.eeprom.with_name(f".{self.eeprom.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"params": {**self.values, **self.unsaved}, "mission": self.mission}))
        os.replace(tmp, self.eeprom)
