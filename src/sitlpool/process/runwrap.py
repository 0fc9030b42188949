"""``sitlpool run``'s guardian: everything a run command starts dies with ``sitlpool run``.

A command may be a wrapper (``sh -c 'arducopter ... &'``, a script, a trailing ``&``) whose
SITL outlives it. So ``sitlpool run`` (R) forks a guardian (W) that runs the command (C):

- W is a child subreaper: whatever C starts and abandons is re-parented to W, never to init;
- W gets a parent-death signal: when R dies, SIGKILL included, W stops every descendant
  (SIGTERM, SIGKILL after a grace) and exits; only then is the lease (whose fd W and C hold
  with R) free;
- when C exits, W stops what C left in the background, as R did before;
- every process of the command carries ``SITLPOOL_RUN_TOKEN=<token>`` in its environment,
  and ``sessions/<n>/run.json`` names the token, R and W: if W dies too (killed with R),
  ``leftovers`` proves what is left (our user's, started after W, holding the token or
  listed by W in ``run.pids``, orphaned rather than under another live guardian) and
  ``reap_run`` kills it, for ``sitlpool reap`` and ``sitlpool kill N``.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from .. import pidfiles, procinfo

TOKEN_ENV = "SITLPOOL_RUN_TOKEN"
GRACE_S = 3.0  # real SITL ignores SIGTERM until ~2.5 s after its first client
#: what `sitlpool run` and its guardian pass on to the command instead of dying of it. SIGQUIT
#: too: a terminal's Ctrl-\ reaches the whole foreground group, and a shell's background job
#: ignores it (as it ignores SIGINT), so run and guardian dying of it left the SITL and its lease
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: the same signal reaching the guardian twice within this is one request to stop, not two
SAME_REQUEST_S = 0.2  # a forward lags by milliseconds; a person asks again after longer
#: how often the guardian rewrites ``run.pids`` (only when what runs under it changed)
LIST_EVERY_S = 1.0


class _ParentDied(Exception):
    pass


def run_guarded(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    lease_fd: int,
    data_dir: Path,
    instance: int,
    owner: str,
    report: Callable[[str], None],
) -> int:
    """Run ``argv`` under a guardian; return its exit code (128+N for a signal N). ``lease_fd``
    (a duplicate of the lease's fd) is handed to the guardian and the command and closed here."""
    token = secrets.token_hex(16)
    run_pid = os.getpid()
    procinfo.become_subreaper()  # if the guardian alone is killed, what it ran comes to us
    before = set(procinfo.children(run_pid))  # we may run inside a process with children of its own
    sys.stdout.flush()
    sys.stderr.flush()
    guardian = os.fork()
    if guardian == 0:  # pragma: no cover - the guardian (covered by the tests' processes)
        code = 1
        try:
            code = _guardian(
                argv, dict(env, **{TOKEN_ENV: token}), cwd, lease_fd, run_pid, (data_dir, instance, token), report
            )
            pidfiles.remove_run(data_dir, instance, token)
        finally:
            os._exit(code)  # the guardian's copy of the lease goes only now: after everything it ran
    os.close(lease_fd)
    try:
        pidfiles.write_run(
            data_dir,
            pidfiles.RunRecord(
                instance=instance,
                token=token,
                guardian_pid=guardian,
                guardian_start_ticks=procinfo.start_ticks(guardian) or 0,
                run_pid=run_pid,
                run_start_ticks=procinfo.start_ticks(run_pid) or 0,
                argv=list(argv),
                owner=owner,
            ),
        )
    except (OSError, pidfiles.BadEntry) as e:
        report(f"cannot record the command in {data_dir}: {e}; 'sitlpool reap' cannot find what it leaves")

    def forward(signum: int, _frame: FrameType | None) -> None:
        # Ctrl-C (Ctrl-\) at a terminal already reached the guardian and the command (same foreground group)
        if signum in (signal.SIGINT, signal.SIGQUIT):
            try:
                if os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp():
                    return
            except OSError:
                pass
        try:
            os.kill(guardian, signum)
        except ProcessLookupError:
            pass

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    _, status = os.waitpid(guardian, 0)
    code = os.waitstatus_to_exitcode(status)
    left = procinfo.stop_leftovers(spare=before)  # only if the guardian was killed on its own
    if left:
        report(f"the guardian of {os.path.basename(argv[0])} died; stopped pid {', '.join(map(str, left))}")
    pidfiles.remove_run(data_dir, instance, token)
    return code if code >= 0 else 128 - code


def _guardian(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    lease_fd: int,
    run_pid: int,
    run: tuple[Path, int, str],
    report: Callable[[str], None],
) -> int:
    """The guardian's life: run the command (listing what it runs in ``run.pids``), stop
    what it leaves; if ``sitlpool run`` dies first, stop everything at once."""
    instance = run[1]

    def parent_died(_signum: int, _frame: FrameType | None) -> None:
        raise _ParentDied

    signal.signal(signal.SIGUSR1, parent_died)
    procinfo.set_parent_death_signal(signal.SIGUSR1)
    procinfo.become_subreaper()
    asked: list[tuple[int, float]] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        # a second request to stop a command that ignored the first ends it (SIGKILL): a
        # command ignoring SIGTERM must not make `sitlpool run` (and its lease) unstoppable.
        # The same signal twice at once is one request: a signal to the process group
        # (`kill -TERM -PGID`, `timeout`) reaches the guardian and, forwarded, through run
        now = time.monotonic()
        again = any(s != signum or now - t > SAME_REQUEST_S for s, t in asked)
        asked.append((signum, now))
        if again:
            signum = signal.SIGKILL
        if child is not None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    try:
        if os.getppid() != run_pid:  # `sitlpool run` died before the parent-death signal was set
            raise _ParentDied
        try:
            # the command holds the lease too: if the guardian is SIGKILLed, the instance stays
            # leased until the command (which may ignore the SIGTERM it then gets) exits
            child = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                preexec_fn=procinfo.die_with_parent(os.getpid(), sig=signal.SIGTERM),  # TERM: it may clean up
                pass_fds=(lease_fd,),
            )
        except OSError as e:
            report(f"cannot run {argv[0]}: {e.strerror}; check the command name and PATH")
            return 127
        code = _wait_listing(child, run)
        left = procinfo.stop_leftovers()
        if left:
            report(
                f"{os.path.basename(argv[0])} left {len(left)} process(es) running (pid {', '.join(map(str, left))}); "
                f"stopped them before releasing instance {instance}"
            )
        return code if code >= 0 else 128 - code
    except _ParentDied:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        stop_all(os.getpid())
        report(f"sitlpool run (pid {run_pid}) died; stopped everything {os.path.basename(argv[0])} started")
        return 137


def _wait_listing(child: subprocess.Popen[bytes], run: tuple[Path, int, str]) -> int:
    """Wait for ``child``; meanwhile keep ``run.pids`` naming every process under this
    guardian, so one that drops the token from its environment can still be proven ours."""
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # no pidfds (Linux < 5.3): the token alone proves leftovers
        return child.wait()
    listed: list[tuple[int, int]] = []
    timeout = 0.2  # the first list soon: a run killed within its first second leaves one too
    try:
        while not select.select([pidfd], [], [], timeout)[0]:
            timeout = LIST_EVERY_S
            now = sorted((p, t) for p in procinfo.descendants(os.getpid()) if (t := procinfo.start_ticks(p)))
            if now != listed:
                try:
                    pidfiles.write_run_pids(*run, now)
                    listed = now
                except (OSError, pidfiles.BadEntry):
                    pass
    finally:
        os.close(pidfd)
    return child.wait()


def stop_all(guardian: int, grace: float = GRACE_S, poll: float = 0.02) -> list[int]:
    """SIGTERM every descendant of ``guardian`` (this process, a subreaper), SIGKILL those
    alive after ``grace``, until none is left; the pids signalled."""
    signalled: dict[int, float] = {}
    while True:
        for p in list(signalled):
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        left = procinfo.descendants(guardian)
        if not left:
            return sorted(signalled)
        now = time.monotonic()
        for p in left:
            try:
                if p not in signalled:
                    os.kill(p, signal.SIGTERM)
                    signalled[p] = now
                elif now - signalled[p] >= grace:
                    os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(poll)


# ---- what `sitlpool reap` and `sitlpool kill N` may kill ---------------------------------------


@dataclass
class Leftovers:
    """A run command's processes left behind when ``sitlpool run`` and its guardian died."""

    record: pidfiles.RunRecord
    pids: list[int] = field(default_factory=list)  # live, ours, started after the guardian, holding the token
    #: each pid's start ticks when it was proven ours: a pid that exits and is reused before
    #: the kill is never signalled
    ticks: dict[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        cmd = os.path.basename(self.record.argv[0]) if self.record.argv else "?"
        return (
            f"sitlpool run {cmd} (pid {self.record.run_pid}, owner {self.record.owner or '?'}) and its guardian "
            f"(pid {self.record.guardian_pid}) are gone; left running: pid {', '.join(map(str, self.pids)) or 'none'}"
        )


def leftovers(data_dir: Path, instance: int) -> Leftovers | None:
    """What a dead ``sitlpool run`` left on ``instance``: None if there is no run record or
    its run or guardian is alive (they stop their command themselves). A process counts only
    when all holds: it runs as the record file's user, it started after the guardian, its
    environment holds the record's token (which only the command's processes inherit) or
    the guardian listed it (pid and start ticks) in ``run.pids``, and it was orphaned (see
    ``_orphaned``). Another user's record is theirs: None."""
    try:
        rec = pidfiles.load_run(data_dir, instance)
    except pidfiles.BadEntry:
        return None
    if rec is None:
        return None
    if rec.file_uid != os.geteuid() and os.geteuid() != 0:
        # another user's record (a group-shared data dir): their processes' environments are
        # closed to us, so "nothing left" would be a guess, and dropping the record would
        # leave their leftovers unprovable for them: theirs to reap (or root's)
        return None
    if procinfo.is_alive(rec.guardian_pid, rec.guardian_start_ticks or None) or procinfo.is_alive(
        rec.run_pid, rec.run_start_ticks or None
    ):
        return None
    item = f"{TOKEN_ENV}={rec.token}".encode()
    listed = pidfiles.load_run_pids(data_dir, instance, rec.token, rec.file_uid)  # those that dropped the token
    holders: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        pid = int(d)
        ticks = procinfo.start_ticks(pid)
        if ticks is None or ticks < rec.guardian_start_ticks or procinfo.uid(pid) != rec.file_uid:
            continue
        if (pid, ticks) in listed or procinfo.environ_holds(pid, item):
            holders[pid] = ticks
    pids = sorted(p for p in holders if _orphaned(p, holders.keys(), rec.guardian_start_ticks))
    return Leftovers(rec, pids, {p: holders[p] for p in pids})


def _orphaned(pid: int, holders: Container[int], guardian_ticks: int) -> bool:
    """True if ``pid``'s nearest ancestor outside the token's processes started before the
    recorded guardian: where orphans of a dead guardian go (init, or a subreaper above it).
    A live guardian (of a record forged or copied with the token of a running command) is
    that ancestor otherwise, and it started after the recorded one: nothing of it is taken."""
    seen = set()
    while pid in holders and pid not in seen:
        seen.add(pid)
        parent = procinfo.ppid(pid)
        if parent is None:
            return False
        pid = parent
    if pid == 0:  # the token's process is init itself (a container): no ancestor to ask
        return True
    ticks = procinfo.start_ticks(pid)
    return ticks is not None and ticks < guardian_ticks


def reap_run(data_dir: Path, instance: int, grace: float = GRACE_S) -> Leftovers | None:
    """Kill what a dead ``sitlpool run`` left on ``instance`` (see ``leftovers``) and remove
    its record; None if there was no such record."""
    found = leftovers(data_dir, instance)
    if found is None:
        return None
    ticks = found.ticks
    for p, t in ticks.items():
        try:
            if procinfo.is_alive(p, t):
                os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(procinfo.is_alive(p, t) for p, t in ticks.items()):
        time.sleep(0.02)
    for p, t in ticks.items():
        if procinfo.is_alive(p, t):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    pidfiles.remove_run(data_dir, instance, found.record.token)
    return found


def reap_runs(data_dir: Path, grace: float = GRACE_S) -> list[Leftovers]:
    """``reap_run`` for every instance with a run record."""
    out = []
    for n in pidfiles.instances_with_runs(data_dir):
        got = reap_run(data_dir, n, grace)
        if got is not None:
            out.append(got)
    return out
