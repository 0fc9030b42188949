"""``python -m sitlpool.leases status [--json]``: who holds what, read in a few milliseconds
(no pydantic, no port probe)."""

from __future__ import annotations

import json
import sys

from ..config import format_pool
from ..errors import SitlpoolError
from ._pool import LeasePool
from ._record import format_age


def status_document(pool: LeasePool) -> dict:
    """The lock directory, the pool and every held lease; ``broken``: leases whose lock
    file was removed or replaced while held; ``warnings``: one line each (a lock directory
    others may remove lock files from)."""
    warning = pool.dir_warning()
    held, broken = pool.read()
    return {
        "lock_dir": str(pool.lock_dir),
        "pool": format_pool(pool.pool),
        "held": [h.as_dict() for h in held],
        "broken": [h.as_dict() for h in broken],
        "warnings": [warning] if warning else [],
    }


def status_text(doc: dict) -> str:
    lines = [f"lock dir {doc['lock_dir']}, pool {doc['pool']}"]
    lines += [f"warning: {w}" for w in doc.get("warnings", ())]
    if not doc["held"]:
        lines.append("no instance is leased")
    for h in doc["held"]:
        where = "" if h["in_pool"] else "  (outside the pool)"
        owner = h["owner"] or (
            f"(lock file names {h['record_owner']} pid {h['record_pid']})" if h["record_owner"] else "?"
        )
        if h.get("kept_by"):
            where += f"  (pid {h['pid']} exited; kept by pid {', '.join(map(str, h['kept_by']))})"
        lines.append(f"instance {h['instance']:>4}  pid {h['pid']:>7}  {format_age(h['age_s'])!s:>7}  {owner}{where}")
    for h in doc.get("broken", ()):
        lines.append(
            f"instance {h['instance']:>4}  pid {h['pid']:>7}  BROKEN: {h['record_owner'] or '?'} still holds its "
            "removed lock file; the instance may be leased twice"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "status" or any(a not in ("--json",) for a in args[1:]):
        print("usage: python -m sitlpool.leases status [--json]", file=sys.stderr)
        return 2
    try:
        doc = status_document(LeasePool.from_env(check=False))
    except SitlpoolError as e:
        print(f"sitlpool: {e}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if "--json" in args else status_text(doc))
    return 0
