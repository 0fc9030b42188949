"""Each launch its own configuration: the parameter files people bring (ArduPilot's ``NAME VALUE``
/ ``NAME,VALUE`` ``.parm``, Mission Planner's ``.param``, QGroundControl's tab-separated
``.params``), Lua scripts from the allowlisted folder, the files a launch writes into its SITL's
directory (``scripts/``, ``sitlpool-launch.parm``), and the configuration read back once it
runs: unknown names refused with close matches, every value as the vehicle has it."""

from __future__ import annotations

import math
import os
import re
import stat
import time
from difflib import get_close_matches
from pathlib import Path

from .. import pidfiles
from ..errors import ConfigError, MavlinkError
from ..mavlink.exchange import Inbox
from ..mavlink.wire import float32, show

LAUNCH_PARM = "sitlpool-launch.parm"  # the params and SCR_ENABLE of one launch, last of --defaults
SCRIPTS = "scripts"  # ArduPilot SITL runs the Lua scripts in <cwd>/scripts
MAX_PARAM_FILE_BYTES = 2_000_000  # a full ArduCopter dump is ~40 kB
MAX_SCRIPT_BYTES = 1_000_000
MAX_SCRIPTS = 20
READ_TIMEOUT_S = 3.0
BY_NAME_MAX = 60  # more names than this: the whole list is read instead, one request
_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,15}")


def _shown(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_param_file(path: Path | str) -> dict[str, float]:
    """Name -> value of a parameter file, in its order. ``#`` comments; ``NAME VALUE``,
    ``NAME,VALUE`` (Mission Planner), ``NAME VALUE @READONLY`` (ArduPilot's defaults) and
    QGroundControl's ``sysid<TAB>compid<TAB>NAME<TAB>VALUE<TAB>type`` lines. A line that is
    none of these raises ``ConfigError`` naming the file and the line."""
    path = Path(path)
    return parse_param_text(read_param_bytes(path).decode("utf-8", errors="replace"), path)


def check_param_name(name: object, where: str = "parameter") -> str:
    """``name`` upper-cased if it is an ArduPilot parameter name (1-16 of A-Z, 0-9, _, a letter
    first), else ``ConfigError`` in one line: a space or a newline would break the launch's
    parameter file (a newline could add a parameter of its own)."""
    up = str(name).upper()
    if not _NAME.fullmatch(up):
        raise ConfigError(f"{where} name {_shown(str(name))} is not a parameter name (1-16 of A-Z, 0-9, _)")
    return up


def read_param_bytes(path: Path | str) -> bytes:
    """A parameter file's bytes: a regular file of at most ``MAX_PARAM_FILE_BYTES`` (a FIFO, a
    device or a directory is refused in one line, never opened blocking)."""
    return pidfiles.read_user_file(Path(path), MAX_PARAM_FILE_BYTES, "parameter file")[0]


def parse_param_text(text: str, path: Path | str) -> dict[str, float]:
    """``parse_param_file`` of a file's text (``path`` names it in errors)."""
    out: dict[str, float] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p for p in re.split(r"[\s,]+", line) if p]
        if len(parts) == 5 and "\t" in line and parts[0].isdigit() and parts[1].isdigit():
            parts = parts[2:4]  # QGroundControl: vehicle, component, name, value, type
        elif len(parts) == 3 and parts[2].upper() == "@READONLY":
            parts = parts[:2]
        where = f"parameter file {path} line {i}"
        if len(parts) != 2:
            raise ConfigError(f"{where}: {_shown(line)} is not 'NAME VALUE' (nor NAME,VALUE)")
        name, value = parts[0].upper(), parts[1]
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: {_shown(parts[0])} is not a parameter name (1-16 of A-Z, 0-9, _)")
        try:
            x = float(value)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or abs(x) > 3.4e38:
            raise ConfigError(f"{where}: {name}'s value {_shown(value)} is not a finite number")
        out[name] = x
    return out


def check_param_files(files, base: Path | None = None) -> list[Path]:
    """Each file absolute (relative ones from ``base``, else the working directory), read and parsed."""
    if files is None:
        return []
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    out = []
    for f in files:
        if not isinstance(f, (str, os.PathLike)) or not str(f).strip() or "\0" in str(f):
            raise ConfigError(f"param_files: {f!r} is not a path to a parameter file")
        p = Path(f).expanduser()
        p = (base / p if base is not None and not p.is_absolute() else p).absolute()
        if not p.is_file():
            raise ConfigError(f"parameter file {p} does not exist (or is not a file)")
        parse_param_file(p)
        out.append(p)
    return out


def check_scripts(scripts, settings, binary) -> list[Path]:
    """Lua scripts by name in ``SITLPOOL_SCRIPTS_DIR`` (any path only with ``SITLPOOL_ALLOW_PATHS=1``),
    for a real SITL only. Each an existing ``.lua`` file; names distinct."""
    if not scripts:
        return []
    if isinstance(scripts, (str, os.PathLike)):
        scripts = [scripts]
    if binary is None:
        raise ConfigError(
            "Lua scripts run on real ArduPilot SITL only (the built-in vehicle has no Lua): "
            "set SITLPOOL_SITL_BINARY to an ArduPilot SITL binary, or leave scripts out"
        )
    if len(scripts) > MAX_SCRIPTS:
        raise ConfigError(f"at most {MAX_SCRIPTS} Lua scripts per session, not {len(scripts)}")
    folder = settings.scripts_dir.resolve() if settings.scripts_dir is not None else None
    anywhere = bool(settings.allow_paths)
    if folder is None and not anywhere:
        raise ConfigError(
            "no scripts folder: set SITLPOOL_SCRIPTS_DIR to the folder sessions take Lua scripts from "
            "(or SITLPOOL_ALLOW_PATHS=1 to name any path)"
        )
    out: list[Path] = []
    for s in scripts:
        if not isinstance(s, (str, os.PathLike)) or not str(s).strip() or "\0" in str(s):
            raise ConfigError(f"scripts: {s!r} is not a script name")
        given = Path(s).expanduser()
        p = (folder / given if folder is not None and not given.is_absolute() else given.absolute()).resolve()
        if not anywhere and (folder is None or not p.is_relative_to(folder)):
            raise ConfigError(
                f"script {str(s)[:80]!r} is outside the scripts folder {folder}: name a script in it "
                "(SITLPOOL_ALLOW_PATHS=1 allows any path)"
            )
        if p.suffix != ".lua" or not p.is_file():
            have = sorted(x.name for x in folder.glob("*.lua")) if folder is not None and folder.is_dir() else []
            raise ConfigError(
                f"script {str(s)[:80]!r}: no Lua file {p}"
                + (f"; the scripts folder has {', '.join(have[:20])}" if have else "")
            )
        if p.stat().st_size > MAX_SCRIPT_BYTES:
            raise ConfigError(f"script {p} is larger than {MAX_SCRIPT_BYTES:,} bytes")
        if any(q.name == p.name for q in out):
            raise ConfigError(f"two scripts named {p.name}: SITL runs them from one folder; rename one")
        out.append(p)
    return out


def launch_values(param_files: list[Path], params: dict[str, float], scripts: list[Path]) -> dict[str, float]:
    """Every value a launch asks for, in the order it applies them: the files, then ``params``,
    then ``SCR_ENABLE=1`` when it runs scripts."""
    out: dict[str, float] = {}
    for f in param_files:
        out.update(parse_param_file(f))
    out.update({k.upper(): float(v) for k, v in params.items()})
    if scripts:
        out["SCR_ENABLE"] = 1.0
    return out


def _clear_dir(name: str, dir_fd: int) -> None:
    """Remove ``name`` (a directory of regular files, never followed through a symlink) under ``dir_fd``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        for entry in os.listdir(fd):
            if stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                _clear_dir(entry, fd)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def write_run_files(cwd_fd: int, scripts: list[Path], params: dict[str, float]) -> str | None:
    """In the SITL's directory: ``scripts/`` holds exactly ``scripts`` (an earlier launch's are
    removed), and ``sitlpool-launch.parm`` the launch's own values (``params``, ``SCR_ENABLE``).
    Returns that file's name, or None when there is nothing to write."""
    _clear_dir(SCRIPTS, cwd_fd)
    if scripts:
        os.mkdir(SCRIPTS, 0o755, dir_fd=cwd_fd)
        sfd = os.open(SCRIPTS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cwd_fd)
        try:
            for p in scripts:
                with open(pidfiles.open_new(p.name, dir_fd=sfd), "wb") as out:
                    out.write(p.read_bytes())
        finally:
            os.close(sfd)
    values = dict(params)
    if scripts:
        values["SCR_ENABLE"] = 1.0
    if not values:
        try:
            os.unlink(LAUNCH_PARM, dir_fd=cwd_fd)
        except FileNotFoundError:
            pass
        return None
    with open(pidfiles.open_new(LAUNCH_PARM, dir_fd=cwd_fd), "w") as f:
        f.write("# written by sitlpool for this launch: the session's params (and SCR_ENABLE for its scripts)\n")
        f.writelines(f"{k.upper()} {v:.9g}\n" for k, v in values.items())
    return LAUNCH_PARM


# ---- once it runs: the configuration read back --------------------------------------------


def _read_by_name(link, names: list[str], timeout: float) -> dict[str, float]:
    from ..mavlink.link import A  # pymavlink (~35 ms) only once a vehicle runs, as managed.py loads it

    target = (link.vehicle.sysid or 1, 1)
    got: dict[str, float] = {}
    with Inbox(link, {"PARAM_VALUE"}, lambda m: m.get_srcComponent() == 1) as box:
        for _ in range(2):  # one more ask for the silent ones: a lost request looks the same
            for n in names:
                if n not in got:
                    link.send(A.MAVLink_param_request_read_message(*target, n.encode(), -1))
            deadline = time.monotonic() + timeout / 2
            while len(got) < len(names):
                m = box.get(max(0.0, deadline - time.monotonic()))
                if m is None:
                    break
                n = m.param_id.decode(errors="replace") if isinstance(m.param_id, bytes) else m.param_id
                n = n.rstrip("\x00")
                if n in names:
                    got[n] = float(m.param_value)
            if len(got) == len(names):
                break
    return got


def _all_names(link) -> dict[str, float]:
    from ..mavlink.params import get_all  # pymavlink: see _read_by_name

    return {k: float(v) for k, v in get_all(link)["params"].items()}


def read_back(link, wanted: dict[str, float], origin: dict[str, str], timeout: float = READ_TIMEOUT_S) -> dict:
    """The values the vehicle has for ``wanted``'s names. A name it does not have raises
    ``ConfigError`` naming where it came from (``origin``) and the close matches among the
    vehicle's names (the whole list is read for them)."""
    names = list(wanted)
    if not names:
        return {}
    every: dict[str, float] | None = None
    if len(names) > BY_NAME_MAX:
        every = _all_names(link)
        got = {n: every[n] for n in names if n in every}
    else:
        got = _read_by_name(link, names, timeout)
    unknown = [n for n in names if n not in got]
    if unknown:
        if link.state != "connected":
            raise MavlinkError(f"{link.name}: the vehicle stopped answering while its parameters were read back")
        if every is None:
            every = _all_names(link)
        unknown = [n for n in unknown if n not in every]
        got.update({n: every[n] for n in names if n in every})
    if unknown:
        parts = []
        for n in unknown[:8]:
            close = get_close_matches(n, list(every or {}), n=3, cutoff=0.6)
            hint = (
                f"did you mean {', '.join(close[:-1]) + ' or ' if close[1:] else ''}{close[-1]}?"
                if close
                else "no close match"
            )
            parts.append(f"{n} ({origin.get(n, 'params')}; {hint})")
        more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        raise ConfigError(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} " + "; ".join(parts) + more + ": the vehicle has no "
            "such name, so the SITL was stopped (get_params lists the names a vehicle has)"
        )
    return got


def same(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


def origins(param_files: list[Path], params: dict) -> dict[str, str]:
    """Where each name of a launch comes from, for messages: ``file line N`` or ``params``."""
    out: dict[str, str] = {}
    for f in param_files:
        try:
            lines = Path(f).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i, raw in enumerate(lines, 1):
            parts = [p for p in re.split(r"[\s,]+", raw.split("#", 1)[0].strip()) if p]
            if len(parts) >= 2:
                name = (parts[2] if len(parts) == 5 and parts[0].isdigit() else parts[0]).upper()
                out[name] = f"{f} line {i}"
    for k in params:
        out[k.upper()] = "params"
    return out


def param_values(params: dict | None) -> dict[str, float]:
    """Parameter values as the float32 that PARAM_SET carries (numbers or numeric text)."""
    out = {}
    for k, v in (params or {}).items():
        name = k if isinstance(k, str) and len(k) <= 40 and k.isprintable() else show(k)
        try:
            x = float(v)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"parameter {name}: {show(v)} is not a number") from None
        out[str(k)] = float32(x, f"parameter {name}")
    return out


def settle(h, params: dict[str, float]) -> dict:
    """Once ``h`` (a ``ManagedSitl``) runs: every value its launch asked for read back (a name
    the vehicle lacks refused, with close matches), ``params`` the vehicle does not hold (a kept
    ``eeprom.bin`` wins over defaults files) set, and the configuration it really got."""
    params = {k.upper(): v for k, v in params.items()}
    wanted = launch_values(h.param_files, params, h.scripts)
    got = read_back(h.link, wanted, origins(h.param_files, params)) if wanted else {}
    for k, v in params.items():
        if not same(got.get(k, math.nan), v):
            got[k] = h.link.set_param(k, v)
    config: dict = {
        "model": h.model,
        "home": h.home,
        "speedup": h.speedup,
        "defaults": [f for f in h._defaults_files() if Path(f) not in h.param_files],
        "param_files": [str(p) for p in h.param_files],
        "params": {k: float(f"{v:.7g}") for k, v in got.items()},  # float32 as the vehicle holds it
        "scripts": [p.name for p in h.scripts],
    }
    missed = {n: {"wanted": wanted[n], "got": float(f"{got[n]:.7g}")} for n in wanted if not same(got[n], wanted[n])}
    if missed:
        config["not_applied"] = missed
    return config
