"""Named homes: ArduPilot's ``Tools/autotest/locations.txt`` format (``NAME=lat,lon,alt,heading``,
``#`` comments), read from a small built-in set, the ArduPilot tree of the configured SITL
binary (``<tree>/Tools/autotest/locations.txt``) and the user's own file
(``SITLPOOL_LOCATIONS``), later ones winning. ``resolve_home("CMAC")`` gives
``"-35.363261,149.16523,584,353"``; coordinates pass through unchanged."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from .errors import ConfigError

#: a few of ArduPilot's locations.txt, so that named homes work without a tree
BUILTIN = """\
#NAME=latitude,longitude,absolute-altitude,heading (lines of ArduPilot's Tools/autotest/locations.txt)
OSRF0=37.4003371,-122.0800351,0,353
CMAC=-35.363261,149.165230,584,353
CMAC2=-35.362889,149.165221,584,270
CMAC_South=-35.363261,149.165230,584,173
CMAC_PILOTSBOX=-35.362734,149.165300,586,270
Kingaroy=-26.583528,151.840440,444,169
AVC=40.0713749,-105.2297889,1583.702759,246
Ballarat=-37.598705,143.881744,485,165
KSFO=37.619373,-122.376637,5.3,118
SpringValley=-35.280252,149.005821,580.8,5
ARDUCOPTER_AUTOTEST=-35.362938,149.165085,584,270
"""
MAX_FILE_BYTES = 1_000_000  # a locations file is a few kilobytes; refuse a stray large file
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclass(frozen=True)
class Location:
    name: str
    lat: float
    lon: float
    alt: float
    heading: float
    source: str  # "built-in" or the file it came from

    @property
    def home(self) -> str:
        """As SITL's ``--home`` takes it."""
        return f"{self.lat:.9g},{self.lon:.9g},{self.alt:g},{self.heading:g}"

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "lat": self.lat,
            "lon": self.lon,
            "alt": self.alt,
            "heading": self.heading,
            "source": self.source,
        }


def parse(text: str, source: str) -> dict[str, Location]:
    """``NAME=lat,lon,alt,heading`` lines; a bad line raises ``ConfigError`` naming ``source`` and the line."""
    out: dict[str, Location] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, eq, value = (p.strip() for p in line.partition("="))
        parts = [p.strip() for p in value.split(",")]
        where = f"{source} line {i}"
        if not eq or not _NAME.fullmatch(name) or len(parts) != 4:
            raise ConfigError(
                f"{where}: {line[:60]!r} is not a location; write NAME=lat,lon,alt,heading "
                "(e.g. CMAC=-35.363261,149.165230,584,353)"
            )
        try:
            lat, lon, alt, hdg = (float(p) for p in parts)
        except ValueError:
            raise ConfigError(f"{where}: {value[:60]!r} is not four numbers lat,lon,alt,heading") from None
        if not all(map(math.isfinite, (lat, lon, alt, hdg))) or abs(lat) > 90 or abs(lon) > 180:
            raise ConfigError(f"{where}: {name} has no position on Earth (latitude -90..90, longitude -180..180)")
        out[name] = Location(name, lat, lon, alt, hdg, source)
    return out


def read_file(path: Path) -> dict[str, Location]:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"locations file {path} is larger than {MAX_FILE_BYTES:,} bytes; is it one?")
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(f"cannot read locations file {path}: {e.strerror or e}") from None
    return parse(text, str(path))


def tree_file(binary: Path | None) -> Path | None:
    """``<tree>/Tools/autotest/locations.txt`` of a binary at ``<tree>/build/sitl/bin/<name>``, if there."""
    if binary is None:
        return None
    b = Path(binary).resolve()
    if b.parent.name != "bin" or b.parent.parent.name != "sitl" or b.parent.parent.parent.name != "build":
        return None
    f = b.parents[3] / "Tools" / "autotest" / "locations.txt"
    return f if f.is_file() else None


def files(settings) -> list[Path]:
    """The files read, in order (the tree's, then the user's ``SITLPOOL_LOCATIONS``)."""
    out = []
    t = tree_file(getattr(settings, "sitl_binary", None))
    if t is not None:
        out.append(t)
    user = getattr(settings, "locations", None)
    if user is not None:
        out.append(Path(user))
    return out


def known(settings=None, extra: Iterable[Path] = ()) -> dict[str, Location]:
    """Every named home: the built-in set, then the tree's file, then the user's (later wins)."""
    out = parse(BUILTIN, "built-in")
    for f in [*(files(settings) if settings is not None else []), *extra]:
        out.update(read_file(f))
    return out


def resolve_home(home: str | None, settings=None) -> str | None:
    """``home`` as SITL's ``--home`` text: a name looked up (case-insensitive when it is not
    exact), coordinates ``lat,lon,alt,heading`` passed through for ``check_home``. An unknown
    name raises ``ConfigError`` naming close matches and where the names come from."""
    if home is None or home == "":
        return None
    if not isinstance(home, str):
        raise ConfigError(f"home {home!r} is neither a location name (e.g. CMAC) nor 'lat,lon,alt,heading'")
    text = home.strip()
    if "," in text:
        return text
    names = known(settings)
    if text in names:
        return names[text].home
    folded = {k.lower(): v for k, v in names.items()}
    if text.lower() in folded:
        return folded[text.lower()].home
    close = get_close_matches(text, list(names), n=5, cutoff=0.5) or get_close_matches(
        text.lower(), list(folded), n=5, cutoff=0.5
    )
    where = ", ".join(["the built-in set", *map(str, files(settings))]) if settings is not None else "the built-in set"
    hint = f"did you mean {', '.join(close)}? " if close else ""
    some = ", ".join(sorted(names)[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    raise ConfigError(f"unknown home {text[:60]!r}: {hint}known names ({where}): {some}; or give 'lat,lon,alt,heading'")
