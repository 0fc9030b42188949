"""Settings (environment prefix ``SITLPOOL_``) and pool parsing.

``Settings`` is the pydantic-settings model every interface uses. ``env_paths`` reads
just the data and lock directories with the same rules, without importing pydantic,
for the commands that must answer in a few tens of milliseconds (``leases status``);
``ValidatedSettings`` carries a ``Settings``' values into a process that must start fast
(a Ray fleet's actor) without re-reading them there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .instances import strict_int, unusable

DEFAULT_POOL = "40-59"
ENV_PREFIX = "SITLPOOL_"


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
        # ASCII digits only: int() would also take '١٠٠', '1_0' and the '-105' of '100--105'
        lo = strict_int(lo_s.strip(), signed=False)
        hi = strict_int(hi_s.strip(), signed=False) if sep else lo
        if lo is None or hi is None:
            raise ConfigError(f"pool {text!r}: {tok!r} is not a number or a range; {hint}")
        if sep and hi < lo:
            raise ConfigError(f"pool {text!r}: range {tok!r} runs backwards; write it as {hi}-{lo}")
        for n in range(lo, hi + 1):
            why = unusable(n)
            if why:
                raise ConfigError(f"pool {text!r}: {why}; leave instance {n} out of the pool")
            if n in seen:
                raise ConfigError(f"pool {text!r}: instance {n} appears twice; write each instance once")
            seen.add(n)
            out.append(n)
    if not out:
        raise ConfigError(f"pool {text!r} is empty; {hint}")
    return tuple(out)


def format_pool(instances) -> str:
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
    # pydantic-settings matches names case-insensitively; do the same here
    want = ENV_PREFIX + name.upper()
    for k, v in environ.items():
        if k.upper() == want and v != "":
            return v
    return None


def env_paths(environ: Mapping[str, str] = os.environ) -> tuple[Path, Path]:
    """``(data_dir, lock_dir)`` as ``Settings`` would resolve them, without pydantic."""
    data = _env(environ, "data_dir")
    data_dir = Path(data).expanduser() if data else default_data_dir(environ)
    lock = _env(environ, "lock_dir")
    return data_dir, (Path(lock).expanduser() if lock else data_dir / "leases")


def env_pool(environ: Mapping[str, str] = os.environ) -> tuple[int, ...]:
    return parse_pool(_env(environ, "pool") or DEFAULT_POOL)


if TYPE_CHECKING:  # pragma: no cover
    Settings: Any


def __getattr__(name: str):
    # pydantic costs ~140 ms to import; only what needs the whole model pays for it
    if name == "Settings":
        from ._settings import Settings

        return Settings
    raise AttributeError(name)


# every field of ``Settings``, in its order (tests/test_config.py keeps the two in step)
SETTINGS_FIELDS = (
    "data_dir",
    "lock_dir",
    "pool",
    "sitl_binary",
    "sitl_defaults",
    "speedup",
    "ready_timeout_s",
    "idle_timeout_s",
)


def settings_values(settings) -> dict:
    """A ``Settings``' validated values as plain data (JSON's types) for ``ValidatedSettings``."""

    def plain(v):
        return str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v

    return {f: plain(getattr(settings, f)) for f in SETTINGS_FIELDS}


class ValidatedSettings:
    """The values of a ``Settings`` that pydantic-settings validated in another process of
    the same host and environment, with the attributes the layers below read. A Ray fleet's
    actor is a fresh process whose start is on the clock of every ``fleet.open``: importing
    pydantic-settings there costs 0.13-0.23 s, so its node's values, read once by a task on
    that node, are handed to it instead. Build it only from ``settings_values``."""

    __slots__ = SETTINGS_FIELDS

    def __init__(self, values: Mapping[str, Any]):
        missing = [f for f in SETTINGS_FIELDS if f not in values]
        if missing:
            raise ConfigError(f"settings values without {', '.join(missing)}: build them with settings_values()")
        for f in SETTINGS_FIELDS:
            v = values[f]
            if f in ("data_dir", "lock_dir") or (f == "sitl_binary" and v is not None):
                v = Path(v)
            elif f == "pool":
                v = tuple(v)
            setattr(self, f, v)

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def model_copy(self, update: Mapping[str, Any] | None = None) -> ValidatedSettings:
        """The same values with ``update`` applied (as ``Settings.model_copy`` does, unvalidated)."""
        return ValidatedSettings({**{f: getattr(self, f) for f in SETTINGS_FIELDS}, **(update or {})})

    def __repr__(self) -> str:
        return "ValidatedSettings(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in SETTINGS_FIELDS) + ")"


def load_settings(**overrides) -> "Settings":  # noqa: UP037, F821  (Settings: see _settings)
    """Read the environment into ``Settings``; a bad value raises ``ConfigError``."""
    from pydantic import ValidationError

    from ._settings import Settings

    try:
        return Settings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        field = ENV_PREFIX + str(err["loc"][0]).upper() if err.get("loc") else "a setting"
        msg = str(err.get("ctx", {}).get("error") or err.get("msg"))
        raise ConfigError(f"{field}: {msg}") from None
