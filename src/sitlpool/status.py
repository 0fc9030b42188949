"""Who holds what, and what each vehicle is doing: the one place this is computed.

``pool_status`` is the document ``sitlpool status --json`` prints (the fleet's node status
and the CLI's table are made from it); ``instances_document`` is what the MCP
``list_instances`` tool answers (the same leases, seen from one server's sessions).
Reading never takes a lock and never connects to a vehicle: leases from ``/proc/locks``,
SITLs from their pid files and sockets, live state from the launchers' state files.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from . import pidfiles, procinfo, statefile
from .config import load_settings
from .instances import ports
from .leases import LeasePool, status_document
from .ports import busy_ports, name_holders, read_sockets, taken
from .process import discover

SCHEMA = 1


def pool_status(settings: Any = None, all_: bool = False) -> dict:
    """The lock directory's leases (each with its SITL from its pid file), leases broken by
    a removed lock file, the SITLs running without a lease, the pool's free instances
    (listed with ``all_``) and those whose ports another process took, and each launcher's
    live state. Planted files in the data directory are listed as unreadable, never raised."""
    s = settings or load_settings()
    pool = LeasePool.from_settings(s, check=False)
    doc: dict[str, Any] = {"schema": SCHEMA, **status_document(pool)}
    for h in doc["held"]:
        h["sitl"] = _sitl(s.data_dir, h["instance"])
    # an instance nobody holds but whose ports a process took (a SITL started without a
    # lease) is "ports taken", never free: acquire would skip it
    availability = pool.availability({h["instance"] for h in doc["held"]})
    av = availability.as_dict()
    doc["running_without_lease"] = [d.as_dict() for d in discover(s, pool)]
    doc["free_count"] = len(av["free"])
    doc["ports_taken"] = av["ports_taken"]
    if all_:
        doc["free"] = av["free"]
    # what each launcher's link last saw (stale if it is gone)
    doc["live"], bad_states = statefile.scan_all(s.data_dir)
    # entries of sessions/ that name no usable instance, state files that cannot be read
    # and pool instances whose lock file a scan refuses (a symlink, a FIFO...): never "free"
    doc["unreadable"] = pidfiles.scan(s.data_dir)[1] + bad_states + list(availability.unusable.values())
    return doc


def _sitl(data_dir: Any, instance: int) -> dict | None:
    rec = pidfiles.read(data_dir, instance)
    if rec is None:
        return None
    return {"pid": rec.pid, "binary": rec.binary, "alive": procinfo.is_alive(rec.pid, rec.start_ticks)}


def instances_document(
    settings: Any,
    pool: LeasePool,
    all_: bool = False,
    sessions: Mapping[int, str] | None = None,
    leases: Container[int] = (),
) -> dict:
    """What MCP ``list_instances`` answers: every held lease with its busy ports, and whether
    it is one of this server's (``sessions``: instance -> session id of its managed
    sessions; ``leases``: the instances this server leases), the SITLs running without a
    lease, and with ``all_`` the free pool instances and those whose ports are taken.
    ``broken`` and ``warnings`` appear when there are any (see ``pool_status``)."""
    mine = sessions or {}
    holders = pool.status()
    socks = read_sockets()
    busy = {h.instance: busy_ports(ports(h.instance), socks) for h in holders}
    name_holders([b for bs in busy.values() for b in bs])  # one /proc scan for all of them
    held = []
    for h in holders:
        d = h.as_dict()
        d["this_server_session"] = mine.get(h.instance)
        d["this_server_lease"] = h.instance in leases
        d["busy_ports"] = [b.describe() for b in busy[h.instance]]
        held.append(d)
    out: dict[str, Any] = {
        "pool": list(pool.pool),
        "lock_dir": str(pool.lock_dir),
        "leased": held,
        "running_without_lease": [d.as_dict() for d in discover(settings, pool)],
    }
    broken = pool.broken()
    if broken:
        out["broken"] = [h.as_dict() for h in broken]
    warning = pool.dir_warning()
    if warning:
        out["warnings"] = [warning]
    if all_:
        heldset = {h["instance"] for h in held}
        bad = pool.bad_lock_files()  # a lock file a scan refuses: never free
        unleased = [n for n in pool.pool if n not in heldset and n not in bad]
        busy_free = taken([ports(n) for n in unleased])  # an unleased SITL holds them: not free
        out["free"] = [n for n in unleased if n not in busy_free]
        unusable = [why for n, why in bad.items() if n not in heldset]
        if unusable:
            out["unusable"] = unusable
        if busy_free:
            name_holders([b for bs in busy_free.values() for b in bs])
            out["ports_taken"] = [
                {"instance": n, "state": "ports taken", "busy_ports": [b.describe() for b in bs]}
                for n, bs in busy_free.items()
            ]
    return out
