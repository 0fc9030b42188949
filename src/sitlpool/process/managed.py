"""SITLs we launch: on a lease, in their own process group, with a pid file, watched by a
waiter thread that sees their death at once; killed with their group. Which binary runs is
``binaries``'s concern, reaping orphans and ``kill_instance`` is ``reaping``'s."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from .. import locations, pidfiles, procinfo
from ..config import format_pool, load_settings
from ..errors import ProcessError, SitlpoolError, UnusableInstance
from ..instances import Ports
from ..instances import ports as _ports_of
from ..leases import Lease, LeasePool
from ..ports import probe
from ..statefile import StateWriter, start_writer
from . import keeplogs, paramfiles
from .base import ProcessManager, SitlProcess, Status
from .binaries import REAL_MAX_INSTANCE, builtin_command, resolve_binary, tree_defaults
from .output import stderr_tail
from .reaping import KILL_GRACE_S, ReapReport, reap_locked

log = logging.getLogger("sitlpool.managed")


PARAM_COPY_PREFIX = "sitlpool-param-"  # the user's parameter files, as NAME VALUE, in the SITL's cwd


def holder_of(owner: str, pid: int | None = None) -> str:
    """Who holds the session, for its log records: the owner with "pid N" (this process's)
    added, unless the owner already names it ("sitlpool demo (pid 18691)")."""
    pid = os.getpid() if pid is None else pid
    return owner if re.search(rf"\bpid {pid}\b", owner) else f"{owner} pid {pid}"


class ManagedSitl(SitlProcess):
    """A SITL launched by sitlpool on a leased instance. The launcher stays its parent, and
    the SITL dies with the launcher's process (a parent-death signal set before exec).
    Once it ended, its logs (``logs/*.BIN``, and ``tlog=True``'s ``.tlog``) are in the log
    store: ``kept_logs``; while it runs, ``current_log()`` is the one it writes."""

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
        tlog: bool = False,
        param_files: list | None = None,
        scripts: list | None = None,
    ):
        super().__init__(process_manager, name, host_id)
        self.settings = settings or load_settings()
        self.pool = pool or LeasePool.from_settings(self.settings)
        self.model = model
        self.binary = resolve_binary(self.settings, model)  # e.g. arduplane beside a configured arducopter
        self.requested_instance = instance
        self.wait_s = wait
        self.home = locations.resolve_home(home, self.settings)  # a named home (CMAC) as coordinates
        self.speedup = self.settings.speedup if speedup is None else speedup
        self.defaults = defaults
        self.wipe = wipe
        self.owner = owner or f"sitlpool {name} pid {os.getpid()}"
        self.extra_args = list(extra_args or [])
        # each launch its own configuration: files after the tree's defaults, Lua scripts (real SITL),
        # the values of ManagedManager.start's params (written as the last defaults file)
        self.param_files = paramfiles.check_param_files(param_files)
        # their values, read now: each goes to the SITL as a NAME VALUE copy in cwd (neither vehicle
        # reads QGroundControl's tab format or Mission Planner's NAME,VALUE as --defaults)
        self._param_file_values = [paramfiles.parse_param_file(p) for p in self.param_files]
        self._param_copies: list[str] = []  # their copies' names in cwd, once written
        self.scripts = paramfiles.check_scripts(scripts, self.settings, self.binary)
        self.launch_params: dict[str, float] = {}
        self.launch_parm: str | None = None  # its file's name in cwd, once written
        self.config: dict = {}  # the configuration it really got, read back once it runs
        self.tlog = tlog  # record the link's MAVLink traffic as cwd/logs/sitlpool-<time>.tlog
        self.tlog_path: Path | None = None
        self.started_at: float | None = None  # wall time of the launch
        self._kept_logs: list = []
        self.lease: Lease | None = None
        self.popen: subprocess.Popen | None = None
        self.cwd: Path | None = None
        self.argv: list[str] = []
        self._thread_error: BaseException | None = None
        self._waiter: threading.Thread | None = None
        self._state_writer: StateWriter | None = None  # once the link is up
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

    def _base_defaults(self) -> list[str]:
        """The defaults files before the user's: given, SITLPOOL_SITL_DEFAULTS, or the tree's."""
        files = self.defaults
        if files is None and self.settings.sitl_defaults:
            files = [f for f in self.settings.sitl_defaults.split(",") if f]
        if files is None and self._binary:
            files = [str(p) for p in tree_defaults(self._binary, self.model)]
        return list(files or [])

    def _defaults_files(self) -> list[str]:
        """The defaults files and then the user's parameter files (by their own paths)."""
        return self._base_defaults() + [str(p) for p in self.param_files]

    def _write_param_copies(self, cwd_fd: int) -> list[str]:
        """Each user parameter file as ``NAME VALUE`` lines in cwd (``sitlpool-param-N.parm``, in
        order), an earlier launch's copies removed; their names."""
        for old in os.listdir(cwd_fd):
            if old.startswith(PARAM_COPY_PREFIX) and old.endswith(".parm"):
                os.unlink(old, dir_fd=cwd_fd)
        names = []
        for i, (src, values) in enumerate(zip(self.param_files, self._param_file_values), 1):
            name = f"{PARAM_COPY_PREFIX}{i}.parm"
            with open(pidfiles.open_new(name, dir_fd=cwd_fd), "w") as f:
                f.write(f"# written by sitlpool for this launch: {src} as NAME VALUE\n")
                f.writelines(f"{k} {v:.9g}\n" for k, v in values.items())
            names.append(name)
        return names

    def _command(self, n: int) -> list[str]:
        binary = self._binary
        cmd = [str(binary)] if binary else builtin_command()
        cmd += ["-I", str(n), "--model", self.model, "--speedup", f"{self.speedup:g}"]
        if self.home:
            cmd += ["--home", self.home]
        files = self._base_defaults()
        if self.cwd is not None:
            files += [str(self.cwd / name) for name in self._param_copies]
        if self.launch_parm and self.cwd is not None:
            files.append(str(self.cwd / self.launch_parm))
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
                f"{d.stat().st_uid}); its owner can make it group-writable (chmod 3775) or remove it"
            )
        try:
            r = reap_locked(self.settings.data_dir, n)
        except (SitlpoolError, OSError) as e:  # a bad entry never blocks the pool scan
            r = ReapReport(n, "skipped", str(e))
        if r and r.action != "gone":
            log.warning("instance %s: %s", n, r.reason)
        why = pidfiles.foreign_record(self.settings.data_dir, n)  # another user's sitl.pid we may not replace
        if why:
            raise UnusableInstance(f"cannot use instance {n}: {why}")
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
            # logs an earlier SITL here left behind (its holder was killed before it could keep them)
            keeplogs.collect(
                self.settings.data_dir,
                self.cwd / "logs",
                {"instance": n, "note": "left in the instance's directory by an earlier SITL"},
                f"instance {n}: ",
            )
            try:
                try:  # scripts/ and sitlpool-launch.parm: this launch's, never an earlier one's
                    self.launch_parm = paramfiles.write_run_files(cwd_fd, self.scripts, self.launch_params)
                    self._param_copies = self._write_param_copies(cwd_fd)
                except OSError as e:
                    raise ProcessError(
                        f"cannot write the SITL's configuration into {self.cwd}: {e.strerror or e}; "
                        "free space there or point SITLPOOL_DATA_DIR elsewhere"
                    ) from None
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
                    self.started_at = time.time()
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
        if self.popen is not None and self.lease is not None:  # the lease comes first
            with self._life:
                procinfo.signal_group(self.popen.pid, signal.SIGKILL)  # not reaped yet: the group is still ours
                self.popen.wait()
                self._reaped = True
            self._keep_logs()
            pidfiles.remove(self.settings.data_dir, self.lease.instance, self.popen.pid)
        if self.lease is not None:
            self.lease.release()
        self._finish(Status.lost(f"launch failed: {error}"))

    def _wait_exit(self) -> None:
        """Blocks in waitid until the SITL exits: death is seen with no polling delay."""
        lease, popen = self._launched()
        try:
            pid = popen.pid
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its pgid cannot be reused
            with self._life:
                procinfo.signal_group(pid, signal.SIGKILL)  # anything it left in its group
                _, ws = os.waitpid(pid, 0)
                self._reaped = True
            popen.returncode = os.waitstatus_to_exitcode(ws)
            status = Status.from_wait_status(ws, self.quitting)
        except BaseException as e:  # pragma: no cover - keep the reason for verify_threads_state
            self._thread_error = e
            status = Status.lost(f"waiter thread failed: {e!r}")
        if self._state_writer is not None:
            self._state_writer.stop()  # its state file goes with it, while the lease still keeps others off n
        self._keep_logs()  # the process is gone (nothing writes its logs now); the lease keeps others off n
        pidfiles.remove(self.settings.data_dir, lease.instance, popen.pid)
        lease.release()
        self._finish(status)

    def _keep_logs(self) -> None:
        """Move the logs it wrote into the log store (after its process is gone). Never raises."""
        if self.link is not None:
            self.link.close()  # its .tlog is closed, and AUTOPILOT_VERSION known or not, from here on
        if self.cwd is None:
            return
        fields = keeplogs.fields_for(
            owner=self.owner,
            instance=self.instance,
            model=self.model,
            argv=self.argv,
            binary_version=getattr(self.link, "autopilot_version", None),
            start=self.started_at,
            holder=holder_of(self.owner),
        )
        self._kept_logs = keeplogs.collect(self.settings.data_dir, self.cwd / "logs", fields, f"{self.name}: ")

    @property
    def kept_logs(self) -> list:
        """The records (``logs.LogRecord``) of the logs moved into the log store when it ended."""
        return list(self._kept_logs)

    def current_log(self) -> Path | None:
        """The DataFlash log the SITL is writing now (readable while it flies), or None
        (no log yet: ArduCopter opens one at arming, or it ended)."""
        if self.cwd is None or self.dead:
            return None
        from ..logs.sitldir import current_log  # sitlpool.logs loads DFReader (~0.4 s): see keeplogs.collect

        return current_log(self.cwd / "logs")

    def wait_running(self, timeout: float | None = None) -> bool:
        if self.popen is None:
            raise ProcessError(f"{self.name} was never spawned; call spawn() first")
        lease, popen = self._launched()
        timeout = self.settings.ready_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self.link is None and not self.dead:
            # our link is SERIAL0's client: SITL boots only once it connects
            # pymavlink costs ~35 ms to import: only when a link is made, never for `sitlpool status`,
            # `reap` or `kill`, which import this module
            from ..mavlink.link import VehicleLink

            if self.tlog and self.cwd is not None:
                stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
                self.tlog_path = self.cwd / "logs" / f"sitlpool-{stamp}.tlog"
            self.link = VehicleLink(
                f"tcp:127.0.0.1:{lease.ports.serial0}",
                name=f"{self.name} (instance {lease.instance})",
                tlog=self.tlog_path,
            )
            self.link.gcs_heartbeat_period = min(1.0, 1.0 / max(self.speedup, 1.0))  # a GCS beat each sim second
            self.link.start()
            # `sitlpool status` shows its live state; stops with the link
            self._state_writer = start_writer(self.link, self.settings.data_dir, lease.instance, popen.pid)
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
            f"{self.name}: the SITL on instance {self.lease.instance if self.lease else '?'} "
            f"{self.status.reason if self.status else 'ended'} before it was ready"
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
                if not self._reaped and self.popen is not None:
                    procinfo.signal_group(self.popen.pid, signal.SIGKILL)

    def verify_threads_state(self) -> None:
        if self._thread_error is not None:
            raise self._thread_error

    def _endpoint(self, name: str) -> str:
        lease, _ = self._launched()
        return f"tcp:127.0.0.1:{lease.ports.serial(name)}"

    def _launched(self) -> tuple[Lease, subprocess.Popen]:
        """The lease and the process of a launched SITL (spawn sets both before they are asked for)."""
        assert self.lease is not None and self.popen is not None, f"{self.name} was not launched"
        return self.lease, self.popen


class ManagedManager(ProcessManager):
    """Launches ManagedSitl handles: ``start(name, ...)`` returns a running (ready) handle."""

    def __init__(self, settings=None, pool: LeasePool | None = None, on_dead=None):
        super().__init__(on_dead)
        self.settings = settings or load_settings()
        self.pool = pool or LeasePool.from_settings(self.settings)

    def start(self, name: str, *, ready_timeout: float | None = None, params: dict | None = None, **kw) -> ManagedSitl:
        values = paramfiles.param_values(params)  # checked before anything is launched: 1e39 would fail when sent
        h = ManagedSitl(self, name, settings=self.settings, pool=self.pool, **kw)
        h.launch_params = values  # applied at boot (the last --defaults file), confirmed once it runs
        self._add(h)
        try:
            h.spawn()
            if not h.wait_running(ready_timeout):
                t = self.settings.ready_timeout_s if ready_timeout is None else ready_timeout
                h.kill(wait=True)
                raise ProcessError(
                    f"{name}: no HEARTBEAT from the SITL on instance {h.instance} within {t:g}s; "
                    "it was killed and its lease released (a slow machine? raise SITLPOOL_READY_TIMEOUT_S)"
                )
            h.config = paramfiles.settle(h, values)
        except BaseException:
            if not h.dead:
                h.kill(wait=True)
            self.forget(h)
            raise
        return h
