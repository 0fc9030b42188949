"""The server's tool list, kept where the stdio wire can answer ``tools/list`` before the MCP
SDK is loaded.

The list is not written by hand: each time the server starts with the SDK it renders its own
tool definitions exactly as the SDK answers ``tools/list`` (``ListToolsResult`` of
``MCPServer.list_tools``) and stores them under a key made of what decides that answer:
sitlpool's version, the source of every module of ``sitlpool.server`` (where the tools, their
arguments and descriptions are defined), and the versions of the MCP SDK and pydantic that
render them. A start whose key has no entry (a new install, an edited tool) answers
``tools/list`` only once the SDK is loaded, and writes the entry for the next start; the wire
also compares each early answer with the SDK's own and logs any difference.

The cache is ``$XDG_CACHE_HOME/sitlpool`` (``~/.cache/sitlpool``): the user's own, mode 0700;
an entry is read only if it is a regular file owned by this user and writable by nobody else
(a planted file could otherwise put words in the tools' descriptions an agent reads).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import sys
from pathlib import Path

log = logging.getLogger("sitlpool.server")

HERE = Path(__file__).resolve().parent
PREFIX = "mcp-tools-"
KEEP = 8  # entries kept (one per installed sitlpool/SDK combination in use)
MAX_BYTES = 4 << 20
#: the distributions whose versions shape the rendered tool list
RENDERERS = ("mcp", "mcp_types", "pydantic", "pydantic_core")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sitlpool"


def _dist_versions() -> list[str]:
    """``name-version`` of each renderer, from the dist-info directory names on sys.path (a
    few directory listings; importlib.metadata costs ~30 ms, most of the wire's budget)."""
    want = {n.replace("_", "-").lower() for n in RENDERERS}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, ver = name[: -len(".dist-info")].partition("-")
                dist = dist.replace("_", "-").lower()
                if dist in want and dist not in found:
                    found[dist] = f"{dist}-{ver}"
        if len(found) == len(want):
            break
    return sorted(found.values())


def key(sitlpool_version: str) -> str:
    """The key of this installation's tool list (see the module's docstring)."""
    h = hashlib.sha256()
    h.update(f"sitlpool {sitlpool_version}\n".encode())
    for v in _dist_versions():
        h.update(f"{v}\n".encode())
    for path in sorted(HERE.rglob("*.py")):
        h.update(str(path.relative_to(HERE)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


def load(k: str) -> list[dict] | None:
    """The tools stored under key ``k``; None if there is none we can trust."""
    d = cache_dir()
    try:
        dst = os.stat(d, follow_symlinks=False)
        if not _ours(dst, stat.S_ISDIR):
            return None
        fd = os.open(d / f"{PREFIX}{k}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _ours(st, stat.S_ISREG) or st.st_size > MAX_BYTES:
            log.warning("ignoring the MCP tool-list cache %s: not a private file of this user", d)
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            doc = json.loads(f.read(MAX_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    tools = doc.get("tools") if isinstance(doc, dict) and doc.get("key") == k else None
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
        return None
    return tools


def _ours(st: os.stat_result, kind) -> bool:
    return kind(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def store(k: str, tools: list[dict]) -> None:
    """Store ``tools`` under ``k`` (atomically; older entries beyond ``KEEP`` removed)."""
    d = cache_dir()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _ours(os.stat(d, follow_symlinks=False), stat.S_ISDIR):
            log.warning("not caching the MCP tool list: %s is not a private directory of this user", d)
            return
        path = d / f"{PREFIX}{k}.json"
        if load(k) == tools:
            return
        tmp = d / f".{PREFIX}{k}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps({"key": k, "tools": tools}, separators=(",", ":")).encode())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        entries = sorted(d.glob(f"{PREFIX}*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError as e:  # a read-only home, a full disk: the next start answers a little later, that is all
        log.info("could not cache the MCP tool list in %s: %s", d, e)
