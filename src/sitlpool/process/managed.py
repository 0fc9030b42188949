"""SITLs we launch: on a lease, in their own process group, with a pid file; reaped
when provably orphaned, never when someone holds their instance."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import pidfiles, procinfo
from ..config import load_settings
from ..errors import KillRefused, LeaseError, ProcessError, SitlpoolError, UnusableInstance
from ..instances import Ports, unusable
from ..instances import ports as _ports_of
from ..leases import Lease, LeasePool
from ..ports import SITL_NAMES, busy_ports, name_holders, probe, proc_name
from .base import ProcessManager, SitlProcess, Status

log = logging.getLogger("sitlpool.managed")
REAL_MAX_INSTANCE = 255  # ArduPilot SITL keeps -I in 8 bits: `-I 300` binds instance 44's ports
KILL_GRACE_S = 3.0  # real SITL ignores SIGTERM until ~2.5 s after its first client
STDERR_TAIL = 8


def builtin_command() -> list[str]:
    return [sys.executable, "-m", "sitlpool.sim"]


# models -> the ArduPilot binary that flies them (SITL's --model names)
PLANE_MODELS = ("plane", "quadplane", "glider", "plane-", "quadplane-", "jsbsim", "last_letter", "plane-tailsitter")
ROVER_MODELS = ("rover", "boat", "sailboat", "balancebot", "motorboat")
VEHICLE_BINARIES = {"arducopter", "arducopter-heli", "arduplane", "ardurover", "ardusub", "antennatracker", "blimp"}


def binary_for_model(model: str) -> str | None:
    m = (model or "").lower()
    if m.startswith(("plane", "quadplane")) or m in PLANE_MODELS:
        return "arduplane"
    if m.startswith(ROVER_MODELS):
        return "ardurover"
    if m.startswith("heli"):
        return "arducopter-heli"
    if m in (
        "quad",
        "copter",
        "+",
        "x",
        "hexa",
        "octa",
        "octa-quad",
        "tri",
        "y6",
        "dodeca-hexa",
        "deca",
        "hexax",
        "octax",
        "quadplus",
        "quadx",
        "coaxcopter",
        "singlecopter",
        "cwx",
    ):
        return "arducopter"
    return None


def resolve_binary(settings, model: str) -> Path | None:
    """The SITL binary that flies ``model`` under ``settings``: the configured one, or the
    vehicle binary of the model beside it in the same build (``model='plane'`` with
    ``.../bin/arducopter`` configured runs ``.../bin/arduplane``). Refuses what cannot fly
    it: the built-in vehicle is a copter only."""
    binary = settings.sitl_binary
    want = binary_for_model(model)
    if binary is None:
        from ..sim.__main__ import MODELS

        if model.lower() not in MODELS:
            kind = {"arduplane": "a plane", "ardurover": "a rover", "arducopter-heli": "a helicopter"}.get(want, "")
            raise SitlpoolError(
                f"the built-in vehicle is a copter only ({', '.join(sorted(MODELS))}); model {model!r}"
                + (f" is {kind} and" if kind else "")
                + " needs a real ArduPilot SITL: set SITLPOOL_SITL_BINARY "
                f"to {want or 'an ArduPilot SITL binary'} (e.g. <ardupilot>/build/sitl/bin/{want or 'arduplane'})"
            )
        return None
    binary = Path(binary)
    if want is None or binary.name not in VEHICLE_BINARIES or binary.name == want:
        return binary
    sibling = binary.parent / want
    if sibling.is_file():
        return sibling
    raise SitlpoolError(
        f"model {model!r} is flown by {want}, but the configured SITL binary is {binary} and there is "
        f"no {want} beside it; build it there or set SITLPOOL_SITL_BINARY to an {want}"
    )


def tree_defaults(binary: Path, model: str) -> list[Path]:
    """The ArduPilot tree's default parameter files for a binary at ``<tree>/build/sitl/bin/<name>``."""
    b = Path(binary).resolve()
    if b.parent.name != "bin" or b.parent.parent.name != "sitl" or b.parent.parent.parent.name != "build":
        return []
    tree = b.parents[3]
    name = b.name
    candidates = {
        "arducopter": ["Tools/autotest/default_params/copter.parm"],
        "arducopter-heli": ["Tools/autotest/default_params/copter-heli.parm"],
        "arduplane": ["Tools/autotest/models/plane.parm", "Tools/autotest/default_params/plane.parm"],
        "ardurover": ["Tools/autotest/default_params/rover.parm"],
        "ardusub": ["Tools/autotest/default_params/sub.parm"],
    }.get(name, [])
    for rel in candidates:
        if (tree / rel).is_file():
            return [tree / rel]
    return []


# terminal escape sequences (CSI, OSC, others) and the remaining control characters
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal escape sequences; other control characters shown as '?'
    (a binary's raw output must not drive the terminal of whoever reads our error)."""
    text = _ESCAPES.sub("", text.replace("\r\n", "\n"))
    return _CONTROLS.sub("?", text.replace("\t", " "))


def stderr_tail(path: Path, lines: int = STDERR_TAIL) -> str:
    """The last ``lines`` lines of a SITL's stderr, made safe to print."""
    try:
        data = path.read_bytes()[-8192:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(printable(ln) for ln in data.strip().splitlines()[-lines:])


def is_sitl_process(pid: int) -> bool:
    """A known ArduPilot SITL binary or our simulator (by process name or command line)."""
    if procinfo.state(pid) is None:
        return False
    if proc_name(pid) in SITL_NAMES:
        return True
    argv = procinfo.cmdline(pid)
    return "sitlpool.sim" in argv or any(Path(a).name in SITL_NAMES for a in argv[:1])


def argv_instance(argv: list[str]) -> int | None:
    """The instance a SITL command line asks for (``-I N``, ``-IN``, ``--instance N``,
    ``--instance=N``; SITL's default is 0), or None if it is not a number."""
    n = "0"
    for i, a in enumerate(argv[1:], 1):
        if a in ("-I", "--instance"):
            n = argv[i + 1] if i + 1 < len(argv) else ""
        elif a.startswith("--instance="):
            n = a.partition("=")[2]
        elif a.startswith("-I"):
            n = a[2:]
    return int(n) if n.isascii() and n.isdigit() else None


# ---- orphan reaping and kill_instance ----------------------------------------------------


@dataclass
class ReapReport:
    instance: int | None  # None for an entry of sessions/ that names no instance
    action: str  # "terminated", "killed", "gone", "recycled pid", "removed", "dropped", "left alone", "skipped"
    reason: str
    pid: int | None = None
    signalled: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "instance": self.instance,
            "action": self.action,
            "reason": self.reason,
            "pid": self.pid,
            "signalled": self.signalled,
        }

    def describe(self) -> str:
        return (f"instance {self.instance}: " if self.instance is not None else "") + f"{self.action}: {self.reason}"


def _same_executable(rec: pidfiles.PidRecord, pid: int) -> bool:
    running = procinfo.exe(pid)
    if running is None:
        return False
    wanted = rec.exe or os.path.realpath(rec.binary)
    return os.path.realpath(wanted) == os.path.realpath(running)


def kill_target(pid: int) -> tuple[bool, str | None]:
    """May ``pid`` be killed as a SITL, and with its group? ``(group, None)`` if so, else
    ``(False, why not)``. Never this process, its group, or pid 1; never a non-SITL; the
    group only when the SITL leads it and every member is its own child or descendant."""
    if pid <= 1:
        return False, f"pid {pid} is never a SITL"
    if pid == os.getpid():
        return False, f"pid {pid} is this process"
    if not is_sitl_process(pid):
        return False, f"pid {pid} ({proc_name(pid) or '?'}) is not a SITL process"
    group = procinfo.leads_own_group(pid) and pid != os.getpgrp()
    return group, None


def _reap_locked(data_dir: Path, instance: int) -> ReapReport | None:
    """With instance's lease held by us: kill what its pid file names, if it is still that
    process. A record that does not match the live process is dropped, never obeyed."""
    try:
        rec = pidfiles.load(data_dir, instance)
    except pidfiles.BadEntry as e:
        if e.junk:
            pidfiles.remove(data_dir, instance)  # junk in a regular file: ours to clear under the lease
            return ReapReport(instance, "removed", f"{e}; removed")
        return ReapReport(instance, "skipped", f"{e}; skipped")
    if rec is None:
        return None

    def drop(why: str) -> ReapReport:
        pidfiles.remove(data_dir, instance)
        return ReapReport(
            instance,
            "dropped",
            f"pid file names {rec.describe()}, but {why}: record dropped, nothing signalled",
            rec.pid,
        )

    if rec.pid <= 1:
        return drop(f"pid {rec.pid} is never a SITL")
    if rec.pgid != rec.pid:
        return drop(f"its group {rec.pgid} is not the SITL's own (sitlpool launches every SITL as its group's leader)")
    if not procinfo.is_alive(rec.pid):
        pidfiles.remove(data_dir, instance)
        return ReapReport(instance, "gone", f"{rec.describe()} is no longer running; pid file removed", rec.pid)
    if procinfo.start_ticks(rec.pid) != rec.start_ticks:
        pidfiles.remove(data_dir, instance)
        return ReapReport(
            instance,
            "recycled pid",
            f"pid {rec.pid} now belongs to another process (start time differs); left it alone, pid file removed",
            rec.pid,
        )
    if not procinfo.may_signal(rec.pid):
        # another user's process: only they (or root) can check and stop it, so the record is theirs to keep
        return ReapReport(
            instance,
            "left alone",
            f"{rec.describe()} runs as uid {procinfo.uid(rec.pid)}, whose "
            "processes we may not signal; record kept for that user's reap",
            rec.pid,
        )
    if procinfo.pgid(rec.pid) != rec.pgid:
        return drop(f"pid {rec.pid} is in group {procinfo.pgid(rec.pid)}, not {rec.pgid}")
    if not _same_executable(rec, rec.pid):
        return drop(f"pid {rec.pid} runs executable {procinfo.exe(rec.pid)}, not {rec.exe or rec.binary}")
    # a SITL's pid file is written by its launcher, as the SITL's user: a record someone else
    # wrote (a co-user of a shared data dir) names a process that is not theirs to have killed
    owner_uid = procinfo.uid(rec.pid)
    if rec.file_uid is not None and owner_uid != rec.file_uid:
        return drop(f"the pid file belongs to uid {rec.file_uid} and pid {rec.pid} runs as uid {owner_uid}")
    on = argv_instance(procinfo.cmdline(rec.pid))
    if on != instance:
        return drop(
            f"pid {rec.pid} runs on instance {on if on is not None else '?'}, not on instance {instance} "
            "(its command line says so)"
        )
    group, why = kill_target(rec.pid)
    if why:
        return drop(why)
    if rec.pgid == os.getpgrp():
        return drop(f"group {rec.pgid} is the reaper's own")
    how, signalled = procinfo.terminate(rec.pid, rec.start_ticks, KILL_GRACE_S, group=group)
    if how == "refused":
        return ReapReport(
            instance,
            "left alone",
            f"{rec.describe()} runs as uid {procinfo.uid(rec.pid)}, whose "
            "processes we may not signal; record kept for that user's reap",
            rec.pid,
        )
    pidfiles.remove(data_dir, instance)
    if how == "gone":
        return ReapReport(instance, "gone", f"{rec.describe()} exited by itself; pid file removed", rec.pid)
    return ReapReport(
        instance, how, f"orphan: nobody holds instance {instance}; {rec.describe()} {how}", rec.pid, signalled
    )


def reap_orphans(settings=None, pool: LeasePool | None = None, instances=None) -> list[ReapReport]:
    """For each ``sessions/<n>/sitl.pid``: if n's lease can be taken, nothing alive holds n,
    so the SITL it names is an orphan: kill it (verified against the live process). Else
    leave it. Every bad entry is skipped and reported; none stops the others."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    out: list[ReapReport] = []
    if instances is None:
        todo, bad = pidfiles.scan(s.data_dir)
        out += [ReapReport(None, "skipped", why) for why in bad]
    else:
        todo = instances
    for n in todo:
        try:
            lease = pool.acquire(f"sitlpool reaper pid {os.getpid()}", instance=n, check=False, allow_reserved=True)
        except LeaseError:
            h = pool.holder(n)
            out.append(ReapReport(n, "left alone", f"instance {n} is held by {h.describe() if h else 'someone'}"))
            continue
        except (SitlpoolError, OSError, ValueError) as e:
            out.append(ReapReport(n, "skipped", f"{pidfiles.session_dir(s.data_dir, n)}: {e}; skipped"))
            continue
        try:
            r = _reap_locked(s.data_dir, n)
            if r:
                out.append(r)
        except (SitlpoolError, OSError, ValueError) as e:  # one bad entry never stops the others
            out.append(ReapReport(n, "skipped", f"{pidfiles.session_dir(s.data_dir, n)}: {e}; skipped"))
        finally:
            lease.release()
    return out


@dataclass
class KillReport:
    instance: int
    killed: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    still_busy: list[str] = field(default_factory=list)
    signalled: list[int] = field(default_factory=list)  # every pid a signal was sent to

    def as_dict(self) -> dict:
        return {
            "instance": self.instance,
            "killed": self.killed,
            "left_alone": self.left_alone,
            "still_busy": self.still_busy,
            "signalled": self.signalled,
        }

    def describe(self) -> str:
        parts = [f"instance {self.instance}:"]
        parts.append(("killed " + "; ".join(self.killed) if self.killed else "nothing to kill") + ";")
        if self.signalled:
            parts.append("signalled pids " + ", ".join(map(str, self.signalled)) + ";")
        if self.left_alone:
            parts.append("left alone: " + "; ".join(self.left_alone))
        parts.append("ports still taken: " + ", ".join(self.still_busy) if self.still_busy else "ports free")
        return " ".join(parts)


def kill_instance(instance: int, force: bool = False, settings=None, pool: LeasePool | None = None) -> KillReport:
    """Kill the stray SITL on an instance nobody holds (holding its lease throughout). Only
    SITL processes are signalled: a SITL's group only when it leads it and every member is
    its own; anything else holding a port is reported, never signalled."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    why = unusable(instance)
    if why and not force:
        raise KillRefused(
            f"instance {instance} is reserved ({why}); pass force (sitlpool kill --force) to kill what runs there anyway"
        )
    if instance not in pool.pool and not force and not why:
        from ..config import format_pool

        raise KillRefused(
            f"instance {instance} is outside the pool {format_pool(pool.pool)}; pass force (sitlpool kill --force) to kill what runs there anyway"
        )
    try:
        lease = pool.acquire(
            f"sitlpool kill_instance pid {os.getpid()}", instance=instance, check=False, allow_reserved=True
        )
    except LeaseError:
        h = pool.holder(instance)
        raise KillRefused(
            f"instance {instance} is leased to {h.describe() if h else 'someone'}; refusing to kill what a live holder owns "
            "(ask its owner, or stop that process)"
        ) from None
    report = KillReport(instance)
    try:
        r = _reap_locked(s.data_dir, instance)
        if r and r.action in ("terminated", "killed"):
            report.killed.append(f"pid {r.pid} from the pid file ({r.action})")
            report.signalled += r.signalled
        elif r and r.action in ("dropped", "skipped", "left alone"):
            report.left_alone.append(r.reason)
        busy = name_holders(busy_ports(lease.ports))
        seen: set[int] = set()
        for b in busy:
            h = b.holder
            if h is None or h.pid is None:
                report.left_alone.append(b.describe())
                continue
            if h.pid in seen:
                continue
            seen.add(h.pid)
            ticks = procinfo.start_ticks(h.pid)
            group, why = kill_target(h.pid)
            if why:
                report.left_alone.append(f"{b.describe()}: {why}")
                continue
            how, signalled = procinfo.terminate(h.pid, ticks, KILL_GRACE_S, group=group)
            if how == "gone":  # it exited by itself meanwhile
                continue
            if how == "refused":
                report.left_alone.append(
                    f"{b.describe()}: runs as uid {procinfo.uid(h.pid)}, whose processes we may "
                    "not signal (ask that user)"
                )
                continue
            report.signalled += [p for p in signalled if p not in report.signalled]
            whom = f"its group {h.pid}" if group else "that process only (its group is not its own)"
            report.killed.append(f"{h.name} pid {h.pid} on {b.proto}:{b.port} ({how}; signalled {whom})")
        report.still_busy = [b.describe() for b in name_holders(busy_ports(lease.ports))]
    finally:
        lease.release()
    return report


# ---- the managed handle -----------------------------------------------------------------


class ManagedSitl(SitlProcess):
    """A SITL launched by sitlpool on a leased instance. The launcher stays its parent, and
    the SITL dies with the launcher's process (a parent-death signal set before exec)."""

    def __init__(
        self,
        process_manager,
        name: str,
        *,
        model: str = "quad",
        instance: int | None = None,
        wait: float = 0,
        home: str | None = None,
        speedup: float | None = None,
        defaults: list[str] | None = None,
        wipe: bool = True,
        owner: str | None = None,
        extra_args: list[str] | None = None,
        settings=None,
        pool: LeasePool | None = None,
        host_id: str = "localhost",
    ):
        super().__init__(process_manager, name, host_id)
        self.settings = settings or load_settings()
        self.pool = pool or LeasePool.from_settings(self.settings)
        self.model = model
        self.binary = resolve_binary(self.settings, model)  # e.g. arduplane beside a configured arducopter
        self.requested_instance = instance
        self.wait_s = wait
        self.home = home
        self.speedup = self.settings.speedup if speedup is None else speedup
        self.defaults = defaults
        self.wipe = wipe
        self.owner = owner or f"sitlpool {name} pid {os.getpid()}"
        self.extra_args = list(extra_args or [])
        self.lease: Lease | None = None
        self.popen: subprocess.Popen | None = None
        self.cwd: Path | None = None
        self.argv: list[str] = []
        self._thread_error: BaseException | None = None
        self._waiter: threading.Thread | None = None
        self._state_writer = None  # statefile.StateWriter once the link is up
        # spawn, kill and the waiter agree through this lock: no launch after kill, and no
        # signal to a pid once it is reaped (it could name another process by then)
        self._life = threading.Lock()
        self._spawning = False
        self._reaped = False

    @property
    def instance(self) -> int | None:
        return self.lease.instance if self.lease else None

    @property
    def ports(self) -> Ports | None:
        return self.lease.ports if self.lease else None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def _binary(self) -> Path | None:
        return self.binary

    def _defaults_files(self) -> list[str]:
        files = self.defaults
        if files is None and self.settings.sitl_defaults:
            files = [f for f in self.settings.sitl_defaults.split(",") if f]
        if files is None and self._binary:
            files = [str(p) for p in tree_defaults(self._binary, self.model)]
        return list(files or [])

    def _command(self, n: int) -> list[str]:
        binary = self._binary
        cmd = [str(binary)] if binary else builtin_command()
        cmd += ["-I", str(n), "--model", self.model, "--speedup", f"{self.speedup:g}"]
        if self.home:
            cmd += ["--home", self.home]
        files = self._defaults_files()
        if files:
            cmd += ["--defaults", ",".join(files)]
        if self.wipe:
            cmd.append("-w")
        return cmd + self.extra_args

    def _beyond_binary(self, n: int) -> str | None:
        """Why a real ArduPilot binary cannot run on instance n, or None."""
        if self._binary is not None and n > REAL_MAX_INSTANCE:
            return (
                f"instance {n} is above {REAL_MAX_INSTANCE}: ArduPilot SITL keeps -I in 8 bits and would bind "
                f"instance {n % 256}'s ports; with a real SITL binary use instances 1-{REAL_MAX_INSTANCE}"
            )
        return None

    def _check(self, n: int) -> str | None:
        """Under n's lease: a SITL that our pid file for n names is an orphan (nobody else
        can hold n now), reaped at once so a crash never strands the instance; then the
        port probe."""
        beyond = self._beyond_binary(n)
        if beyond:  # not a matter of ports: this instance is unusable with this binary
            raise UnusableInstance(beyond)
        try:  # a session dir that is a symlink or a file (anyone in a shared data dir can make one)
            d = pidfiles.check_dir(self.settings.data_dir, n)
        except pidfiles.BadEntry as e:
            raise UnusableInstance(f"cannot use instance {n}'s directory: {e}") from None
        if d.exists() and not os.access(d, os.W_OK | os.X_OK):  # another member's, not group-writable
            raise UnusableInstance(
                f"cannot use instance {n}'s directory {d}: not writable by you (it belongs to uid "
                f"{d.stat().st_uid}); its owner can make it group-writable (chmod 2775) or remove it"
            )
        try:
            r = _reap_locked(self.settings.data_dir, n)
        except (SitlpoolError, OSError) as e:  # a bad entry never blocks the pool scan
            r = ReapReport(n, "skipped", str(e))
        if r and r.action != "gone":
            log.warning("instance %s: %s", n, r.reason)
        return probe(_ports_of(n))

    def _check_files(self) -> None:
        binary = self._binary
        if binary is not None and not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise ProcessError(
                f"SITL binary {binary} is not an executable file; fix SITLPOOL_SITL_BINARY or unset it "
                "to use the built-in vehicle"
            )
        for f in self._defaults_files():
            # real SITL starts without it and spins at 100% CPU once its first client connects
            if not os.path.isfile(f):
                raise ProcessError(
                    f"defaults file {f} does not exist (SITL would hang on it after its first client); "
                    "fix SITLPOOL_SITL_DEFAULTS or the defaults given, or leave them unset"
                )

    def spawn(self) -> None:
        with self._life:
            if self._spawning or self.popen is not None:
                raise ProcessError(f"{self.name} was already spawned; create a new handle to launch again")
            if self.quitting:
                raise ProcessError(f"{self.name} was stopped before it was launched")
            self._spawning = True
        try:
            self._check_files()
            if self.requested_instance is not None and self._beyond_binary(self.requested_instance):
                raise ProcessError(self._beyond_binary(self.requested_instance))
            if (
                self.requested_instance is None
                and self._binary is not None
                and all(n > REAL_MAX_INSTANCE for n in self.pool.pool)
            ):
                from ..config import format_pool

                raise ProcessError(
                    f"pool {format_pool(self.pool.pool)} has no instance below {REAL_MAX_INSTANCE + 1}, and "
                    f"ArduPilot SITL ({self._binary}) keeps -I in 8 bits; set SITLPOOL_POOL to instances "
                    f"1-{REAL_MAX_INSTANCE} (e.g. 40-59) to launch it"
                )
            self.lease = self.pool.acquire(
                self.owner, instance=self.requested_instance, check=self._check, wait=self.wait_s
            )
            n = self.lease.instance
            try:
                pidfiles.check_dir(self.settings.data_dir, n)  # never through a symlink: files would land elsewhere
                self.cwd, cwd_fd = pidfiles.run_dir(self.settings.data_dir, n)
            except pidfiles.BadEntry as e:
                raise ProcessError(f"cannot use instance {n}'s directory: {e}") from None
            except OSError as e:
                raise ProcessError(
                    f"cannot create the SITL's directory in {pidfiles.session_dir(self.settings.data_dir, n)}: "
                    f"{e.strerror}; make SITLPOOL_DATA_DIR writable or point it elsewhere"
                ) from None
            try:
                self.argv = self._command(n)
                try:
                    out = open(pidfiles.open_new("stdout", dir_fd=cwd_fd), "wb")
                    try:
                        err = open(pidfiles.open_new("stderr", dir_fd=cwd_fd), "wb")
                    except BaseException:
                        out.close()
                        raise
                except OSError as e:
                    raise ProcessError(
                        f"cannot create the SITL's output files in {self.cwd}: {e.strerror}; "
                        "free space there or point SITLPOOL_DATA_DIR elsewhere"
                    ) from None
                with out, err, self._life:
                    if self.quitting:
                        raise ProcessError(f"{self.name} was stopped before it was launched")
                    self.popen = procinfo.popen_tied(
                        self.argv,
                        cwd_fd=cwd_fd,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                        close_fds=True,
                    )
            finally:
                os.close(cwd_fd)
            pid = self.popen.pid
            try:
                pidfiles.write(
                    self.settings.data_dir,
                    pidfiles.PidRecord(
                        instance=n,
                        pid=pid,
                        pgid=pid,
                        start_ticks=procinfo.start_ticks(pid) or 0,
                        binary=self.argv[0],
                        argv=self.argv,
                        owner=self.owner,
                        holder_pid=os.getpid(),
                        exe=procinfo.exe(pid) or "",
                    ),
                )
            except OSError as e:
                raise ProcessError(
                    f"cannot write the pid file {pidfiles.session_dir(self.settings.data_dir, n) / pidfiles.PID_FILE}: "
                    f"{e.strerror or e}; the SITL was killed and instance {n} released "
                    "(free space there, or remove what is in the way)"
                ) from None
        except BaseException as e:
            self._abort_launch(e)
            raise
        self._waiter = threading.Thread(target=self._wait_exit, name=f"waiter {self.name}", daemon=True)
        self._waiter.start()

    def _abort_launch(self, error: BaseException) -> None:
        """A launch failed part-way: kill and reap what was started, release the lease, end the handle."""
        if self.popen is not None:
            with self._life:
                procinfo.signal_group(self.popen.pid, signal.SIGKILL)  # not reaped yet: the group is still ours
                self.popen.wait()
                self._reaped = True
            pidfiles.remove(self.settings.data_dir, self.lease.instance, self.popen.pid)
        if self.lease is not None:
            self.lease.release()
        self._finish(Status.lost(f"launch failed: {error}"))

    def _wait_exit(self) -> None:
        """Blocks in waitid until the SITL exits: death is seen with no polling delay."""
        try:
            pid = self.popen.pid
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its pgid cannot be reused
            with self._life:
                procinfo.signal_group(pid, signal.SIGKILL)  # anything it left in its group
                _, ws = os.waitpid(pid, 0)
                self._reaped = True
            self.popen.returncode = os.waitstatus_to_exitcode(ws)
            status = Status.from_wait_status(ws, self.quitting)
        except BaseException as e:  # pragma: no cover - keep the reason for verify_threads_state
            self._thread_error = e
            status = Status.lost(f"waiter thread failed: {e!r}")
        if self._state_writer is not None:
            self._state_writer.stop()  # its state file goes with it, while the lease still keeps others off n
        pidfiles.remove(self.settings.data_dir, self.lease.instance, self.popen.pid)
        self.lease.release()
        self._finish(status)

    def wait_running(self, timeout: float | None = None) -> bool:
        if self.popen is None:
            raise ProcessError(f"{self.name} was never spawned; call spawn() first")
        timeout = self.settings.ready_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self.link is None and not self.dead:
            # our link is SERIAL0's client: SITL boots only once it connects
            from ..mavlink import VehicleLink  # pymavlink costs ~60 ms to import: only when a link is made

            self.link = VehicleLink(
                f"tcp:127.0.0.1:{self.lease.ports.serial0}", name=f"{self.name} (instance {self.lease.instance})"
            ).start()
            from ..statefile import start_writer  # `sitlpool status` shows its live state; stops with the link

            self._state_writer = start_writer(self.link, self.settings.data_dir, self.lease.instance, self.popen.pid)
            if self.dead:
                # it died between the check and the link: a link left connecting would become
                # the next SITL's SERIAL0 client on this instance, and that one only serves one
                self.link.close()
        while time.monotonic() < deadline:
            if self.dead:
                break
            if self.link.wait_heartbeat(min(0.05, max(0.0, deadline - time.monotonic()))):
                return True
        if self.dead:
            raise ProcessError(self._exit_explanation())
        return False

    def _exit_explanation(self) -> str:
        tail = stderr_tail(self.cwd / "stderr") if self.cwd else ""
        return (
            f"{self.name}: the SITL on instance {self.lease.instance if self.lease else '?'} {self.status.reason} before it was ready"
            + (f"; last lines of its stderr:\n{tail}" if tail else " (its stderr is empty)")
        )

    def kill(self, wait: bool = False) -> None:
        """SIGTERM the group, SIGKILL after a short grace; reaped, pid file removed, lease released.
        Real SITL dies of the SIGTERM before its setup and exits 0 after it: both end here."""
        with self._life:
            self._quitting.set()
            popen, spawning = self.popen, self._spawning
            if popen is not None and not self._reaped and not self.dead:
                if self.link is not None:
                    self.link.close()  # we stop it on purpose: no "vehicle closed" warning
                procinfo.signal_group(popen.pid, signal.SIGTERM)
                threading.Thread(target=self._escalate, daemon=True, name=f"kill {self.name}").start()
        if popen is None and not spawning:
            if self.lease:
                self.lease.release()
            self._finish(Status.detached("never spawned"))
            return
        # a spawn in progress sees the request before it launches, or is killed as above
        if wait:
            self.join()

    def _escalate(self) -> None:
        if not self._dead.wait(KILL_GRACE_S):
            with self._life:
                if not self._reaped:
                    procinfo.signal_group(self.popen.pid, signal.SIGKILL)

    def verify_threads_state(self) -> None:
        if self._thread_error is not None:
            raise self._thread_error

    def _endpoint(self, name: str) -> str:
        return f"tcp:127.0.0.1:{self.lease.ports.serial(name)}"


class ManagedManager(ProcessManager):
    """Launches ManagedSitl handles: ``start(name, ...)`` returns a running (ready) handle."""

    def __init__(self, settings=None, pool: LeasePool | None = None, on_dead=None):
        super().__init__(on_dead)
        self.settings = settings or load_settings()
        self.pool = pool or LeasePool.from_settings(self.settings)

    def start(self, name: str, *, ready_timeout: float | None = None, params: dict | None = None, **kw) -> ManagedSitl:
        h = ManagedSitl(self, name, settings=self.settings, pool=self.pool, **kw)
        self._add(h)
        try:
            h.spawn()
            if not h.wait_running(ready_timeout):
                t = self.settings.ready_timeout_s if ready_timeout is None else ready_timeout
                h.kill(wait=True)
                raise ProcessError(
                    f"{name}: no HEARTBEAT from the SITL on instance {h.lease.instance} within {t:g}s; "
                    "it was killed and its lease released (a slow machine? raise SITLPOOL_READY_TIMEOUT_S)"
                )
            for k, v in (params or {}).items():
                h.link.set_param(k, v)
        except BaseException:
            if not h.dead:
                h.kill(wait=True)
            with self._cond:
                self.processes.pop(name, None)
                if h in self._dead:
                    self._dead.remove(h)
            raise
        return h
