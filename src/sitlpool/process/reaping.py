"""Orphan reaping and ``kill_instance``: what may be killed as a SITL, proven against the
live process (start time, executable, group, user, instance) while holding the instance's
lease, so that nothing a live holder owns and nothing that is not a SITL is ever signalled."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import pidfiles, procinfo
from ..config import format_pool, load_settings
from ..errors import KillRefused, LeaseError, SitlpoolError
from ..instances import unusable
from ..leases import LeasePool
from ..ports import busy_ports, name_holders, proc_name
from . import keeplogs, runwrap
from .binaries import argv_instance, is_sitl_process

KILL_GRACE_S = 3.0  # real SITL ignores SIGTERM until ~2.5 s after its first client


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


def keep_orphan_logs(data_dir: Path, instance: int, rec: pidfiles.PidRecord) -> None:
    """The SITL ``rec`` names is gone (reaped, or died with its launcher): keep the logs it
    left in its directory, recorded with what its pid file says. Only our own user's: another
    user's logs are theirs to keep. Never raises (a log not moved stays where it is)."""
    me = os.geteuid()
    if rec.file_uid is not None and rec.file_uid != me:
        return
    keeplogs.collect(
        data_dir,
        keeplogs.run_dir_of(data_dir, instance, me) / "logs",
        keeplogs.fields_for(
            owner=rec.owner,
            instance=instance,
            model=keeplogs.argv_model(rec.argv),
            argv=rec.argv or [rec.binary],
            binary_version=None,
            start=rec.time or None,
            holder=f"{rec.owner or '?'} pid {rec.holder_pid}",
        ),
        f"instance {instance}: ",
    )


def reap_locked(data_dir: Path, instance: int) -> ReapReport | None:
    """With instance's lease held by us: kill what its pid file names, if it is still that
    process, and keep the logs it left. A record that does not match the live process is
    dropped, never obeyed."""
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
        keep_orphan_logs(data_dir, instance, rec)
        return ReapReport(instance, "gone", f"{rec.describe()} is no longer running; pid file removed", rec.pid)
    if procinfo.start_ticks(rec.pid) != rec.start_ticks:
        pidfiles.remove(data_dir, instance)
        keep_orphan_logs(data_dir, instance, rec)
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
    keep_orphan_logs(data_dir, instance, rec)  # after it is gone: a live SITL may still write
    if how == "gone":
        return ReapReport(instance, "gone", f"{rec.describe()} exited by itself; pid file removed", rec.pid)
    return ReapReport(
        instance, how, f"orphan: nobody holds instance {instance}; {rec.describe()} {how}", rec.pid, signalled
    )


# ---- what a dead `sitlpool run` left (its guardian's record: process/runwrap.py) ---------


def run_leftover(data_dir: Path, instance: int) -> ReapReport | None:
    """Kill what a dead ``sitlpool run`` left on ``instance`` (a SITL that a wrapper command
    such as ``sh -c '... &'`` started, which may hold the lease through an inherited lock
    descriptor), proven by ``runwrap``'s record: ``run`` and its guardian gone, the process
    ours, started after the guardian, carrying the record's token. None when ``instance``
    has no run record, or ``run`` or its guardian still lives (they stop their command)."""
    try:
        found = runwrap.reap_run(data_dir, instance, KILL_GRACE_S)
    except (SitlpoolError, OSError, ValueError) as e:
        return ReapReport(instance, "skipped", f"the run record of instance {instance}: {e}; skipped")
    if found is None:
        return None
    if not found.pids:
        return ReapReport(instance, "removed", f"{found.describe()}; its record removed")
    return ReapReport(instance, "killed", found.describe(), found.pids[0], list(found.pids))


def _retry_after_leftover(data_dir: Path, instance: int, pool: LeasePool, owner: str):
    """When the lease is held: kill a dead ``run``'s leftover (which may be what holds it)
    and take the lease again. (lease or None, the leftover's report or None)."""
    r = run_leftover(data_dir, instance)
    if r is None or r.action not in ("terminated", "killed"):
        return None, r
    try:
        return pool.acquire(owner, instance=instance, check=False, allow_reserved=True), r
    except LeaseError:
        return None, r


def reap_orphans(settings=None, pool: LeasePool | None = None, instances=None) -> list[ReapReport]:
    """For each ``sessions/<n>/sitl.pid``: if n's lease can be taken, nothing alive holds n,
    so the SITL it names is an orphan: kill it (verified against the live process). Else
    leave it. What a dead ``sitlpool run`` left (``sessions/<n>/run.json``) is killed first,
    as it may be what holds the lease. Every bad entry is skipped and reported; none stops
    the others."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    out: list[ReapReport] = []
    if instances is None:
        todo, bad = pidfiles.scan(s.data_dir)
        run_only = set(pidfiles.instances_with_runs(s.data_dir)) - set(todo)  # a live `run` there is not news
        todo = sorted({*todo, *run_only})
        out += [ReapReport(None, "skipped", why) for why in bad]
    else:
        todo, run_only = instances, set()
    owner = f"sitlpool reaper pid {os.getpid()}"
    for n in todo:
        try:
            lease = pool.acquire(owner, instance=n, check=False, allow_reserved=True)
        except LeaseError:
            lease, leftover = _retry_after_leftover(s.data_dir, n, pool, owner)
            if leftover is not None:
                out.append(leftover)
            if lease is None:
                h = pool.holder(n)
                if n not in run_only:
                    out.append(
                        ReapReport(n, "left alone", f"instance {n} is held by {h.describe() if h else 'someone'}")
                    )
                continue
        except (SitlpoolError, OSError, ValueError) as e:
            out.append(ReapReport(n, "skipped", f"{pidfiles.session_dir(s.data_dir, n)}: {e}; skipped"))
            continue
        try:
            for r in (run_leftover(s.data_dir, n), reap_locked(s.data_dir, n)):
                if r:
                    out.append(r)
        except (SitlpoolError, OSError, ValueError) as e:  # one bad entry never stops the others
            out.append(ReapReport(n, "skipped", f"{pidfiles.session_dir(s.data_dir, n)}: {e}; skipped"))
        finally:
            lease.release()
    return out


def _add_reaped(report: KillReport, r: ReapReport | None, where: str) -> None:
    if r and r.action in ("terminated", "killed"):
        report.killed.append(f"pid {', '.join(map(str, r.signalled)) or r.pid} {where} ({r.action})")
        report.signalled += [p for p in r.signalled if p not in report.signalled]
    elif r and r.action in ("dropped", "skipped", "left alone"):
        report.left_alone.append(r.reason)


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
        raise KillRefused(
            f"instance {instance} is outside the pool {format_pool(pool.pool)}; pass force (sitlpool kill --force) to kill what runs there anyway"
        )
    owner = f"sitlpool kill_instance pid {os.getpid()}"
    report = KillReport(instance)
    try:
        lease = pool.acquire(owner, instance=instance, check=False, allow_reserved=True)
    except LeaseError:
        lease, leftover = _retry_after_leftover(s.data_dir, instance, pool, owner)
        if lease is None:
            h = pool.holder(instance)
            raise KillRefused(
                f"instance {instance} is leased to {h.describe() if h else 'someone'}; refusing to kill what a live "
                "holder owns (ask its owner, or stop that process)"
            ) from None
        _add_reaped(report, leftover, "left by a dead `sitlpool run`")
    try:
        _add_reaped(report, run_leftover(s.data_dir, instance), "left by a dead `sitlpool run`")
        r = reap_locked(s.data_dir, instance)
        if r and r.action in ("terminated", "killed"):
            report.killed.append(f"pid {r.pid} from the pid file ({r.action})")
            report.signalled += [p for p in r.signalled if p not in report.signalled]
        else:
            _add_reaped(report, r, "")
        busy = name_holders(busy_ports(lease.ports))
        seen: set[int] = set()
        for b in busy:
            ph = b.holder
            if ph is None or ph.pid is None:
                report.left_alone.append(b.describe())
                continue
            if ph.pid in seen:
                continue
            seen.add(ph.pid)
            ticks = procinfo.start_ticks(ph.pid)
            group, why = kill_target(ph.pid)
            if why:
                report.left_alone.append(f"{b.describe()}: {why}")
                continue
            how, signalled = procinfo.terminate(ph.pid, ticks, KILL_GRACE_S, group=group)
            if how == "gone":  # it exited by itself meanwhile
                continue
            if how == "refused":
                report.left_alone.append(
                    f"{b.describe()}: runs as uid {procinfo.uid(ph.pid)}, whose processes we may "
                    "not signal (ask that user)"
                )
                continue
            report.signalled += [p for p in signalled if p not in report.signalled]
            whom = f"its group {ph.pid}" if group else "that process only (its group is not its own)"
            report.killed.append(f"{ph.name} pid {ph.pid} on {b.proto}:{b.port} ({how}; signalled {whom})")
        report.still_busy = [b.describe() for b in name_holders(busy_ports(lease.ports))]
    finally:
        lease.release()
    return report
