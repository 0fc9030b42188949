"""SITLs we launch: on a lease, in their own process group, with a pid file; reaped
when provably orphaned, never when someone holds their instance."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import pidfiles, procinfo
from ..config import load_settings
from ..errors import KillRefused, LeaseError, ProcessError
from ..instances import Ports, unusable
from ..instances import ports as _ports_of
from ..leases import Lease, LeasePool
from ..ports import SITL_NAMES, busy_ports, name_holders, probe, proc_name
from .base import ProcessManager, SitlProcess, Status

log = logging.getLogger("sitlpool.managed")
KILL_GRACE_S = 3.0  # real SITL ignores SIGTERM until ~2.5 s after its first client
STDERR_TAIL = 8


def builtin_command() -> list[str]:
    return [sys.executable, "-m", "sitlpool.sim"]


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


def stderr_tail(path: Path, lines: int = STDERR_TAIL) -> str:
    try:
        data = path.read_bytes()[-8192:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.strip().splitlines()[-lines:])


def is_sitl_process(pid: int) -> bool:
    """A known ArduPilot SITL binary or our simulator (by process name or command line)."""
    if procinfo.state(pid) is None:
        return False
    if proc_name(pid) in SITL_NAMES:
        return True
    argv = procinfo.cmdline(pid)
    return "sitlpool.sim" in argv or any(Path(a).name in SITL_NAMES for a in argv[:1])


# ---- orphan reaping and kill_instance ----------------------------------------------------


@dataclass
class ReapReport:
    instance: int
    action: str  # "killed", "terminated", "gone", "left alone", "recycled pid"
    reason: str
    pid: int | None = None

    def as_dict(self) -> dict:
        return {"instance": self.instance, "action": self.action, "reason": self.reason, "pid": self.pid}


def _reap_locked(data_dir: Path, instance: int) -> ReapReport | None:
    """With instance's lease held by us: kill what its pid file names, if it is still that process."""
    rec = pidfiles.read(data_dir, instance)
    if rec is None:
        if (pidfiles.session_dir(data_dir, instance) / pidfiles.PID_FILE).exists():
            pidfiles.remove(data_dir, instance)
            return ReapReport(instance, "removed", "unreadable pid file removed")
        return None
    if not procinfo.is_alive(rec.pid):
        pidfiles.remove(data_dir, instance)
        return ReapReport(instance, "gone", f"{rec.describe()} is no longer running; pid file removed", rec.pid)
    if procinfo.start_ticks(rec.pid) != rec.start_ticks:
        pidfiles.remove(data_dir, instance)
        return ReapReport(instance, "recycled pid", f"pid {rec.pid} now belongs to another process (start time differs); "
                          "left it alone, pid file removed", rec.pid)
    how = procinfo.terminate_group(rec.pgid, rec.pid, KILL_GRACE_S)
    pidfiles.remove(data_dir, instance)
    return ReapReport(instance, how, f"orphan: nobody holds instance {instance}; {rec.describe()} {how}", rec.pid)


def reap_orphans(settings=None, pool: LeasePool | None = None, instances=None) -> list[ReapReport]:
    """For each ``sessions/<n>/sitl.pid``: if n's lease can be taken, nothing alive holds n,
    so the SITL it names is an orphan: kill its group (start ticks verified). Else leave it."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    out: list[ReapReport] = []
    todo = pidfiles.instances_with_records(s.data_dir) if instances is None else instances
    for n in todo:
        try:
            lease = pool.acquire(f"sitlpool reaper pid {os.getpid()}", instance=n, check=False, allow_reserved=True)
        except LeaseError:
            h = pool.holder(n)
            out.append(ReapReport(n, "left alone", f"instance {n} is held by {h.describe() if h else 'someone'}"))
            continue
        try:
            r = _reap_locked(s.data_dir, n)
            if r:
                out.append(r)
        finally:
            lease.release()
    return out


@dataclass
class KillReport:
    instance: int
    killed: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    still_busy: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"instance": self.instance, "killed": self.killed, "left_alone": self.left_alone, "still_busy": self.still_busy}

    def describe(self) -> str:
        parts = [f"instance {self.instance}:"]
        parts.append("killed " + "; ".join(self.killed) if self.killed else "nothing to kill")
        if self.left_alone:
            parts.append("left alone (not a SITL): " + "; ".join(self.left_alone))
        parts.append("ports still taken: " + ", ".join(self.still_busy) if self.still_busy else "ports free")
        return " ".join(parts)


def kill_instance(instance: int, force: bool = False, settings=None, pool: LeasePool | None = None) -> KillReport:
    """Kill the stray SITL on an instance nobody holds (holding its lease throughout)."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    why = unusable(instance)
    if why and not force:
        raise KillRefused(f"instance {instance} is reserved ({why}); pass force to kill what runs there anyway")
    if instance not in pool.pool and not force and not why:
        from ..config import format_pool

        raise KillRefused(f"instance {instance} is outside the pool {format_pool(pool.pool)}; pass force to kill what runs there anyway")
    try:
        lease = pool.acquire(f"sitlpool kill_instance pid {os.getpid()}", instance=instance, check=False,
                             allow_reserved=True)
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
            if is_sitl_process(h.pid):
                pg = procinfo.pgid(h.pid) or h.pid
                # never the group of the caller itself
                target_pg = pg if pg != os.getpgrp() else None
                if target_pg is None:
                    os.kill(h.pid, signal.SIGTERM)
                    how = "terminated"
                else:
                    how = procinfo.terminate_group(target_pg, h.pid, KILL_GRACE_S)
                report.killed.append(f"{h.name} pid {h.pid} on {b.proto}:{b.port} ({how})")
            else:
                report.left_alone.append(b.describe())
        report.still_busy = [b.describe() for b in name_holders(busy_ports(lease.ports))]
    finally:
        lease.release()
    return report


# ---- the managed handle -----------------------------------------------------------------


class ManagedSitl(SitlProcess):
    """A SITL launched by sitlpool on a leased instance. The launcher stays its parent."""

    def __init__(self, process_manager, name: str, *, model: str = "quad", instance: int | None = None,
                 wait: float = 0, home: str | None = None, speedup: float | None = None,
                 defaults: list[str] | None = None, wipe: bool = True, owner: str | None = None,
                 extra_args: list[str] | None = None, settings=None, pool: LeasePool | None = None,
                 host_id: str = "localhost"):
        super().__init__(process_manager, name, host_id)
        self.settings = settings or load_settings()
        self.pool = pool or LeasePool.from_settings(self.settings)
        self.model = model
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
        return self.settings.sitl_binary

    def _command(self, n: int) -> list[str]:
        binary = self._binary
        cmd = [str(binary)] if binary else builtin_command()
        cmd += ["-I", str(n), "--model", self.model, "--speedup", f"{self.speedup:g}"]
        if self.home:
            cmd += ["--home", self.home]
        files = self.defaults
        if files is None and self.settings.sitl_defaults:
            files = [f for f in self.settings.sitl_defaults.split(",") if f]
        if files is None and binary:
            files = [str(p) for p in tree_defaults(binary, self.model)]
        if files:
            cmd += ["--defaults", ",".join(files)]
        if self.wipe:
            cmd.append("-w")
        return cmd + self.extra_args

    def _check(self, n: int) -> str | None:
        """Under n's lease: a SITL that our pid file for n names is an orphan (nobody else
        can hold n now), reaped at once so a crash never strands the instance; then the
        port probe."""
        if pidfiles.read(self.settings.data_dir, n) is not None:
            r = _reap_locked(self.settings.data_dir, n)
            if r and r.action in ("terminated", "killed"):
                log.warning("%s", r.reason)
        return probe(_ports_of(n))

    def spawn(self) -> None:
        if self.popen is not None:
            raise ProcessError(f"{self.name} was already spawned; create a new handle to launch again")
        binary = self._binary
        if binary is not None and not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise ProcessError(f"SITL binary {binary} is not an executable file; fix SITLPOOL_SITL_BINARY or unset it "
                               "to use the built-in vehicle")
        self.lease = self.pool.acquire(self.owner, instance=self.requested_instance, check=self._check, wait=self.wait_s)
        try:
            n = self.lease.instance
            self.cwd = pidfiles.session_dir(self.settings.data_dir, n)
            try:
                self.cwd.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ProcessError(f"cannot create the SITL's directory {self.cwd}: {e.strerror}; "
                                   "make SITLPOOL_DATA_DIR writable or point it elsewhere") from None
            self.argv = self._command(n)
            with open(self.cwd / "stdout", "wb") as out, open(self.cwd / "stderr", "wb") as err:
                self.popen = subprocess.Popen(self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                              start_new_session=True, close_fds=True)
            ticks = procinfo.start_ticks(self.popen.pid) or 0
            pidfiles.write(self.settings.data_dir, pidfiles.PidRecord(
                instance=n, pid=self.popen.pid, pgid=self.popen.pid, start_ticks=ticks, binary=self.argv[0],
                argv=self.argv, owner=self.owner, holder_pid=os.getpid()))
        except BaseException:
            if self.popen is not None:
                procinfo.signal_group(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
                pidfiles.remove(self.settings.data_dir, self.lease.instance)
            self.lease.release()
            raise
        self._waiter = threading.Thread(target=self._wait_exit, name=f"waiter {self.name}", daemon=True)
        self._waiter.start()

    def _wait_exit(self) -> None:
        """Blocks in waitid until the SITL exits: death is seen with no polling delay."""
        try:
            pid = self.popen.pid
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its pgid cannot be reused
            procinfo.signal_group(pid, signal.SIGKILL)  # anything it left in its group
            _, ws = os.waitpid(pid, 0)
            self.popen.returncode = os.waitstatus_to_exitcode(ws)
            status = Status.from_wait_status(ws, self.quitting)
        except BaseException as e:  # pragma: no cover - keep the reason for verify_threads_state
            self._thread_error = e
            status = Status.lost(f"waiter thread failed: {e!r}")
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

            self.link = VehicleLink(f"tcp:127.0.0.1:{self.lease.ports.serial0}",
                                    name=f"{self.name} (instance {self.lease.instance})").start()
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
        return (f"{self.name}: the SITL on instance {self.lease.instance if self.lease else '?'} {self.status.reason} before it was ready"
                + (f"; last lines of its stderr:\n{tail}" if tail else " (its stderr is empty)"))

    def kill(self, wait: bool = False) -> None:
        """SIGTERM the group, SIGKILL after a short grace; reaped, pid file removed, lease released."""
        if self.popen is None:
            if self.lease:
                self.lease.release()
            self._finish(Status.detached("never spawned"))
            return
        if not self.dead:
            self._quitting.set()
            if self.link is not None:
                self.link.close()  # we stop it on purpose: no "vehicle closed" warning
            procinfo.signal_group(self.popen.pid, signal.SIGTERM)
            threading.Thread(target=self._escalate, daemon=True, name=f"kill {self.name}").start()
        if wait:
            self.join()

    def _escalate(self) -> None:
        if not self._dead.wait(KILL_GRACE_S):
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
                raise ProcessError(f"{name}: no HEARTBEAT from the SITL on instance {h.lease.instance} within {t:g}s; "
                                   "it was killed and its lease released (a slow machine? raise SITLPOOL_READY_TIMEOUT_S)")
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
