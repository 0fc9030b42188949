"""Settings (environment prefix ``SITLPOOL_``) and pool parsing.

One form: ``Settings`` is a plain class built from one table of fields (``FIELDS``) and
validated once, when it is made: from the environment and keyword overrides
(``load_settings``), or from the plain values another process of the same host read
(``settings_values`` -> ``ValidatedSettings``: a Ray fleet's actor, which must start fast).
It imports nothing heavier than ``pathlib``, so every command reads it in microseconds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .instances import strict_int, unusable

DEFAULT_POOL = "40-59"
ENV_PREFIX = "SITLPOOL_"


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters: a message quotes what was given
    without repeating megabytes of it."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(str(value))} characters)"


def _instance_number(text: str) -> int | None:
    # ASCII digits only: int() would also take '١٠٠', '1_0' and the '-105' of '100--105'
    if len(text) > 12:  # no instance has more digits; int() refuses past 4300 with its own message
        return None if strict_int(text[:12], signed=False) is None else 10**12
    return strict_int(text, signed=False)


def parse_pool(text: str) -> tuple[int, ...]:
    """Parse ``"40-59"`` or ``"40,41,45-47"`` into instances, in the order written."""
    hint = 'write instance numbers and ranges separated by commas, e.g. SITLPOOL_POOL="40-59" or "40,41,45-47"'
    seen: set[int] = set()
    out: list[int] = []
    tokens = [t.strip() for t in str(text).split(",")]
    for tok in tokens:
        if not tok:
            continue
        lo_s, sep, hi_s = tok.partition("-")
        lo = _instance_number(lo_s.strip())
        hi = _instance_number(hi_s.strip()) if sep else lo
        if lo is None or hi is None:
            raise ConfigError(f"pool {shown(text)}: {shown(tok)} is not a number or a range; {hint}")
        if sep and hi < lo:
            raise ConfigError(f"pool {shown(text)}: range {shown(tok)} runs backwards; write it as {hi}-{lo}")
        for n in range(lo, hi + 1):
            why = unusable(n)
            if why:
                if n >= 10**12:
                    raise ConfigError(f"pool {shown(text)}: {shown(tok)} is no instance number (too large); {hint}")
                raise ConfigError(f"pool {shown(text)}: {why}; leave instance {n} out of the pool")
            if n in seen:
                raise ConfigError(f"pool {shown(text)}: instance {n} appears twice; write each instance once")
            seen.add(n)
            out.append(n)
    if not out:
        raise ConfigError(f"pool {shown(text)} is empty; {hint}")
    return tuple(out)


def format_pool(instances: Iterable[int]) -> str:
    """The shortest ``parse_pool`` text for ``instances`` (order kept, runs folded)."""
    parts: list[str] = []
    run: list[int] = []
    for n in instances:
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(_run_text(run))
        run = [n]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    xdg = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / "sitlpool"


def _env(environ: Mapping[str, str], name: str) -> str | None:
    # names match case-insensitively (as pydantic-settings did); an empty value is unset.
    # Two spellings with two values (SITLPOOL_POOL and sitlpool_pool) are refused: which one
    # won depended on the order of the environment, so two processes could read two pools
    want = ENV_PREFIX + name.upper()
    found = {k: v for k, v in environ.items() if k.upper() == want and v != ""}
    if len(set(found.values())) > 1:
        both = " and ".join(f"{k}={shown(v, 40)}" for k, v in sorted(found.items()))
        raise ConfigError(f"{want} is set twice, with two values ({both}); unset all but one")
    return next(iter(found.values()), None)


# ---- the fields: each one's parser, default and meaning ------------------------------------


def _path(v: Any) -> Path:
    if not isinstance(v, (str, os.PathLike)) or not str(os.fspath(v)).strip() or "\0" in str(os.fspath(v)):
        raise ValueError(f"{shown(v)} is not a path; give a path, e.g. /var/lib/sitlpool")
    # absolute from here on: a launch runs its SITL in another working directory
    return Path(v).expanduser().absolute()


def _optional_path(v: Any) -> Path | None:
    return None if v is None or v == "" else _path(v)


def _optional_text(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not text")
    return v


def _pool(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):
        return parse_pool(v)
    if isinstance(v, Iterable) and all(isinstance(n, int) and not isinstance(n, bool) for n in v):
        return parse_pool(",".join(map(str, v)))
    raise ValueError(f'{v!r} is not a pool; write it as text, e.g. "40-59"')


def _number(gt: float, le: float = math.inf) -> Callable[[Any], float]:
    def parse(v: Any) -> float:
        try:
            # ASCII only, as pydantic read it: float() also takes '١٠' and '１０'
            if isinstance(v, str) and not v.isascii():
                raise ValueError(v)
            x = float(v.strip() if isinstance(v, str) else v)
        except (TypeError, ValueError, OverflowError):
            x = math.nan
        if isinstance(v, bool) or not math.isfinite(x) or x <= gt or x > le:
            upper = f" and at most {le:g}" if le != math.inf else ""
            raise ValueError(
                f"{shown(v)} is not a finite number above {gt:g}{upper}; give one in ASCII digits, e.g. 2.5"
            )
        return x

    return parse


def _flag(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{shown(v)} is not a yes or no; write 1 or 0")


@dataclass(frozen=True)
class Field:
    name: str
    parse: Callable[[Any], Any]
    default: Callable[[dict[str, Any], Mapping[str, str]], Any]  # (the fields read so far, the environment)
    description: str


FIELDS: tuple[Field, ...] = (
    Field(
        "data_dir",
        _path,
        lambda _, env: default_data_dir(env),
        "shared by every sitlpool process of a user or group",
    ),
    Field("lock_dir", _path, lambda got, _: got["data_dir"] / "leases", "default <data_dir>/leases"),
    Field("pool", _pool, lambda *_: parse_pool(DEFAULT_POOL), 'instances to try, e.g. "40-59" or "40,41,45-47"'),
    Field(
        "sitl_binary",
        _optional_path,
        lambda *_: None,
        "a real ArduPilot SITL binary; default: the built-in vehicle",
    ),
    Field("sitl_defaults", _optional_text, lambda *_: None, "comma-separated parameter files passed as --defaults"),
    # finite only: `inf` (or 1e400) made a launch wait forever for its HEARTBEAT
    Field("speedup", _number(0, 1000), lambda *_: 1.0, "default SITL speedup"),
    Field("ready_timeout_s", _number(0), lambda *_: 60.0, "launch to first HEARTBEAT"),
    Field("idle_timeout_s", _number(0), lambda *_: 1800.0, "MCP sessions idle this long close themselves"),
    Field("presets", _optional_path, lambda *_: None, "the presets file (TOML); default <data_dir>/presets.toml"),
    Field("locations", _optional_path, lambda *_: None, "the user's named homes (NAME=lat,lon,alt,heading lines)"),
    Field("scripts_dir", _optional_path, lambda *_: None, "the folder Lua scripts of a session are taken from"),
    Field("allow_paths", _flag, lambda *_: False, "1: sessions may name scripts by any path, not only in scripts_dir"),
)
SETTINGS_FIELDS = tuple(f.name for f in FIELDS)


class Settings:
    """Every ``SITLPOOL_`` setting, validated when made. Keywords override the environment
    (others are ignored, as they always were); a bad value raises ``ConfigError`` naming its variable."""

    __slots__ = SETTINGS_FIELDS
    model_fields: dict[str, Field] = {f.name: f for f in FIELDS}  # as pydantic models name their fields

    data_dir: Path
    lock_dir: Path
    pool: tuple[int, ...]
    sitl_binary: Path | None
    sitl_defaults: str | None
    speedup: float
    ready_timeout_s: float
    idle_timeout_s: float
    presets: Path | None
    locations: Path | None
    scripts_dir: Path | None
    allow_paths: bool

    def __init__(self, _environ: Mapping[str, str] | None = None, **overrides: Any):
        environ = os.environ if _environ is None else _environ
        got: dict[str, Any] = {}
        for f in FIELDS:
            raw = overrides[f.name] if f.name in overrides else _env(environ, f.name)
            try:
                got[f.name] = f.default(got, environ) if raw is None else f.parse(raw)
            except (ValueError, ConfigError) as e:
                raise ConfigError(f"{ENV_PREFIX}{f.name.upper()}: {e}") from None
            object.__setattr__(self, f.name, got[f.name])

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def model_copy(self, update: Mapping[str, Any] | None = None) -> Settings:
        """The same values with ``update`` applied (and checked)."""
        return ValidatedSettings({**settings_values(self), **(update or {})})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and settings_values(self) == settings_values(other)

    __hash__ = None  # type: ignore[assignment]  # mutable in principle, as pydantic models are

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in SETTINGS_FIELDS) + ")"


class ValidatedSettings(Settings):
    """A ``Settings`` made from the plain values another process of the same host read
    (``settings_values``), not from this process's environment: a Ray fleet's actor gets
    its node's values instead of reading them there. Every field must be given."""

    __slots__ = ()

    def __init__(self, values: Mapping[str, Any]):
        missing = [f for f in SETTINGS_FIELDS if f not in values]
        if missing:
            raise ConfigError(f"settings values without {', '.join(missing)}: build them with settings_values()")
        super().__init__({}, **{f: values[f] for f in SETTINGS_FIELDS})


def settings_values(settings: Any) -> dict:
    """A ``Settings``' values as plain data (JSON's types) for ``ValidatedSettings``."""

    def plain(v: Any) -> Any:
        return str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v

    return {f: plain(getattr(settings, f)) for f in SETTINGS_FIELDS}


def load_settings(**overrides: Any) -> Settings:
    """Read the environment into ``Settings``; a bad value raises ``ConfigError``."""
    return Settings(**overrides)


def env_paths(environ: Mapping[str, str] = os.environ) -> tuple[Path, Path]:
    """``(data_dir, lock_dir)`` as ``Settings`` resolves them (without checking the other settings)."""
    got: dict[str, Any] = {}
    for f in FIELDS[:2]:
        raw = _env(environ, f.name)
        try:
            got[f.name] = f.default(got, environ) if raw is None else f.parse(raw)
        except ValueError as e:
            raise ConfigError(f"{ENV_PREFIX}{f.name.upper()}: {e}") from None
    return got["data_dir"], got["lock_dir"]


def env_pool(environ: Mapping[str, str] = os.environ) -> tuple[int, ...]:
    return parse_pool(_env(environ, "pool") or DEFAULT_POOL)
