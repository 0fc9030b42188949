"""Instance leases: an exclusive flock on ``<lock_dir>/instance-<n>.lock``.

The kernel drops a flock when its holder exits, SIGKILL included, so a dead holder
can never strand an instance. The public API is here; each mechanism has its own
private module: ``_record`` (lock file names and records), ``_proclocks`` (who holds a
flock, from /proc), ``_waiter`` (inotify), ``_lease`` (a held lease), ``_holder`` (what a
reader sees), ``_pool`` (``LeasePool``: taking and reading leases), ``_report``
(``python -m sitlpool.leases status [--json]``).
"""

from ._holder import Availability, Holder
from ._lease import _LIVE, Lease
from ._pool import OPEN_FLAGS, PROBE, SHARED_DIR_MODE, WAIT_POLL_S, Check, LeasePool, PortProbe, dir_warning
from ._proclocks import flock_keepers, read_proc_locks
from ._record import (
    LOCK_NAME,
    MAX_OWNER,
    MAX_RECORD_OWNER,
    READ_LIMIT,
    format_age,
    lock_instance,
    lock_path,
    parse_record,
    read_record,
    validate_owner,
)
from ._report import main, status_document

__all__ = [
    "LOCK_NAME",
    "MAX_OWNER",
    "MAX_RECORD_OWNER",
    "OPEN_FLAGS",
    "PROBE",
    "READ_LIMIT",
    "SHARED_DIR_MODE",
    "WAIT_POLL_S",
    "_LIVE",
    "Availability",
    "Check",
    "Holder",
    "Lease",
    "LeasePool",
    "PortProbe",
    "dir_warning",
    "flock_keepers",
    "format_age",
    "lock_instance",
    "lock_path",
    "main",
    "parse_record",
    "read_proc_locks",
    "read_record",
    "status_document",
    "validate_owner",
]
