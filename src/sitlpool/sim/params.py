"""The simulated copter's parameters: defaults, ``--defaults`` files and ``eeprom.bin``."""

from __future__ import annotations

import json
import os
from pathlib import Path

# (value, MAV_PARAM_TYPE): 2=INT8 4=INT16 6=INT32 9=REAL32
DEFAULTS: dict[str, tuple[float, int]] = {
    "SYSID_THISMAV": (1, 4),
    "SYSID_MYGCS": (255, 4),
    "FORMAT_VERSION": (120, 4),
    "FRAME_CLASS": (1, 2),
    "FRAME_TYPE": (1, 2),
    "SIM_SPEEDUP": (1, 9),
    "ARMING_CHECK": (1, 6),
    "DISARM_DELAY": (10, 2),
    "RTL_ALT": (1500, 6),
    "RTL_ALT_FINAL": (0, 6),
    "RTL_LOIT_TIME": (5000, 6),
    "RTL_SPEED": (0, 4),
    "WPNAV_SPEED": (1000, 9),
    "WPNAV_SPEED_UP": (250, 9),
    "WPNAV_SPEED_DN": (150, 9),
    "WPNAV_RADIUS": (200, 9),
    "WPNAV_ACCEL": (250, 9),
    "PILOT_SPEED_UP": (250, 4),
    "PILOT_SPEED_DN": (0, 4),
    "LAND_SPEED": (50, 4),
    "LAND_SPEED_HIGH": (0, 4),
    "LAND_ALT_LOW": (1000, 4),
    "FENCE_ENABLE": (0, 2),
    "FENCE_ALT_MAX": (100, 9),
    "FENCE_RADIUS": (300, 9),
    "BATT_MONITOR": (4, 2),
    "BATT_CAPACITY": (3300, 6),
    "BATT_LOW_VOLT": (10.5, 9),
    "BATT_FS_LOW_ACT": (0, 2),
    "FS_THR_ENABLE": (1, 2),
    "FS_GCS_ENABLE": (0, 2),
    "FLTMODE1": (7, 2),
    "FLTMODE2": (9, 2),
    "FLTMODE3": (6, 2),
    "FLTMODE4": (3, 2),
    "FLTMODE5": (5, 2),
    "FLTMODE6": (0, 2),
    "GPS_TYPE": (1, 2),
    "EK3_ENABLE": (1, 2),
    "AHRS_EKF_TYPE": (3, 2),
    "INS_GYRO_FILTER": (20, 4),
    "MOT_SPIN_ARM": (0.1, 9),
    "MOT_SPIN_MIN": (0.15, 9),
    "MOT_THST_HOVER": (0.39, 9),
    "ANGLE_MAX": (3000, 4),
    "LOG_BITMASK": (176126, 6),
    "SERIAL0_BAUD": (115, 6),
    "SERIAL0_PROTOCOL": (2, 2),
    "SERIAL1_PROTOCOL": (2, 2),
    "SERIAL2_PROTOCOL": (2, 2),
    "SIM_GPS_DISABLE": (0, 2),
    "SIM_BATT_VOLTAGE": (12.6, 9),
    "SIM_WIND_SPD": (0, 9),
    "SIM_WIND_DIR": (180, 9),
}


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
    """Name -> value, in a stable order, persisted as JSON in ``eeprom.bin``."""

    def __init__(self, eeprom: Path, defaults_files: list[Path], wipe: bool, sysid: int | None, speedup: float):
        self.eeprom = eeprom
        self.types = {k: t for k, (_, t) in DEFAULTS.items()}
        values = {k: float(v) for k, (v, _) in DEFAULTS.items()}
        for f in defaults_files:
            for k, v in parse_parm_file(f).items():
                self.types.setdefault(k, 9)
                values[k] = v
        if not wipe and eeprom.exists():
            try:
                saved = json.loads(eeprom.read_text() or "{}")
                for k, v in saved.items():
                    self.types.setdefault(k, 9)
                    values[k] = float(v)
            except (ValueError, AttributeError):
                pass  # a damaged eeprom is like a wiped one, as on the real board
        if sysid is not None:
            values["SYSID_THISMAV"] = float(sysid)
        values["SIM_SPEEDUP"] = float(speedup)
        self.values = values
        self.names = list(values)
        self.save()

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def get(self, name: str, default: float = 0.0) -> float:
        return self.values.get(name, default)

    def set(self, name: str, value: float) -> bool:
        if name not in self.values:
            return False
        if self.types[name] != 9:
            value = float(int(round(value)))
        self.values[name] = float(value)
        self.save()
        return True

    def save(self) -> None:
        tmp = self.eeprom.with_name(f".{self.eeprom.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.values))
        os.replace(tmp, self.eeprom)
