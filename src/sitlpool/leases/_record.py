"""The lock file's name and record: ``owner<TAB>pid<TAB>unix_time[<TAB>extra...]``."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from ..errors import OwnerError
from ..instances import out_of_range

#: the one name sitlpool gives a lock file: ASCII digits, no leading zero (``instance-0150.lock``
#: and ``instance-١٥٠.lock`` are someone else's files, never an instance)
LOCK_NAME = re.compile(r"^instance-(0|[1-9][0-9]{0,3})\.lock$", re.ASCII)
#: the longest owner or label a person or an agent may give
MAX_OWNER = 200
#: the longest owner a lock file records: room for what sitlpool wraps around a label
#: (``sitlpool session f391b1 (<label>) (via sitlpool server ...)``)
MAX_RECORD_OWNER = 2 * MAX_OWNER
#: a record is one short line; more than this is read only as far as needed
READ_LIMIT = 4096


def lock_path(lock_dir: Path, instance: int) -> Path:
    return Path(lock_dir) / f"instance-{instance}.lock"


def lock_instance(name: str) -> int | None:
    """The instance a lock file's name stands for, or None for any other name."""
    m = LOCK_NAME.match(name)
    return None if m is None or out_of_range(int(m.group(1))) else int(m.group(1))


def linked_lock_file(path: str, names: int) -> str:
    # a hard link between two lock files (a member may link any file it can write) made one
    # flock stand for two instances: leasing one showed the other held by the same holder
    return (
        f"lock file {path} has {names} names (a hard link: one lock would stand for two instances or files); "
        "remove the extra name after checking who made it"
    )


def file_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def validate_owner(owner: object, what: str = "owner", limit: int = MAX_OWNER) -> str:
    """The owner (or label) as a lock file records it: whitespace runs made one space.
    Blank, longer than ``limit`` characters, or holding control characters: ``OwnerError``.
    Layers that wrap a user's text in their own (the MCP server) check the user's part
    with this first, so a blank or oversized label is refused, not hidden inside the wrap."""
    text = owner if isinstance(owner, str) else ""
    clean = " ".join(text.split())
    if not clean:
        article = "an" if what[:1] in "aeiou" else "a"
        raise OwnerError(f"a lease needs {article} {what}: a name a person can read, e.g. 'my-test (alice)'")
    if len(clean) > limit:
        raise OwnerError(f"{what} is {len(clean)} characters long; give at most {limit}, a name a person can read")
    if not clean.isprintable():
        bad = next(c for c in clean if not c.isprintable())
        raise OwnerError(f"{what} holds the control character {bad!r}; use printable characters only")
    return clean


def _shorten(text: str, limit: int = MAX_RECORD_OWNER) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "…"


Record = tuple[str | None, int | None, float | None]


def parse_record(data: bytes) -> Record:
    """``owner<TAB>pid<TAB>unix_time[<TAB>extra...]``; garbage gives Nones, never an exception.
    The owner is cut to ``MAX_RECORD_OWNER`` characters and made printable."""
    line = data.decode("utf-8", "replace").split("\n", 1)[0]
    fields = line.split("\t")
    owner = fields[0].strip() or None
    pid: int | None = None
    since: float | None = None
    if len(fields) > 1:
        try:
            pid = int(fields[1])
        except ValueError:
            pid = None
        if pid is not None and pid <= 0:
            pid = None
    if len(fields) > 2:
        try:
            since = float(fields[2])
        except ValueError:
            since = None
        if since is not None and (since != since or since <= 0):  # NaN or nonsense
            since = None
    if owner is not None and (len(owner) > MAX_RECORD_OWNER or not owner.isprintable()):
        owner = _shorten(owner)
    return owner, pid, since


def read_record(fd: int) -> Record:
    """The record of an open lock file. A record too long to read at once (another tool
    wrote megabytes of owner) gives the start of its owner, and its pid and time from the
    line's end, where they are: reading it never costs more than two small reads."""
    head = os.pread(fd, READ_LIMIT, 0)
    if len(head) < READ_LIMIT or b"\n" in head:
        return parse_record(head)
    owner = _shorten(parse_record(head)[0] or "", MAX_RECORD_OWNER) or None
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 256, max(0, size - 256)).rstrip(b"\n").rsplit(b"\n", 1)[-1]
    fields = tail.split(b"\t")
    _, pid, since = parse_record(b"x\t" + b"\t".join(fields[-2:])) if len(fields) >= 3 else (None, None, None)
    if owner and not owner.endswith("…"):
        owner += "…"
    return owner, pid, since


def write_record(fd: int, owner: str) -> bool:
    """Write a record for ``owner`` (already checked by ``validate_owner``); False if the
    file was opened read-only (a lock file we may lock but not write)."""
    data = f"{owner}\t{os.getpid()}\t{time.time():.3f}\n".encode()
    try:
        # write over the old record, then cut what is left of it: never an empty window
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        return True
    except OSError:
        return False
