"""A node's logs, read from the driver: the chunks are read on the node that holds the log
(by the SITL's actor while it lives, by a small task pinned to that node after) and written
here, so a log of any size crosses the cluster a few MB at a time and never whole in memory.
Kept logs are named by id only (``LogStore``'s): a driver never reads a node's arbitrary paths."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import SitlpoolError

CHUNK = 4 << 20  # bytes per call: a 22 MB log in 6 round trips
LIVE = "live"  # the name of a running SITL's live log (the one it writes now)


def read_chunk(path: str | os.PathLike, offset: int, size: int) -> bytes:
    """``size`` bytes of ``path`` from ``offset`` (fewer at its end; none past it)."""
    if not (isinstance(offset, int) and isinstance(size, int)) or offset < 0 or not 0 < size <= CHUNK:
        raise SitlpoolError(f"a log chunk is asked for by offset >= 0 and size 1-{CHUNK}, not {offset!r}, {size!r}")
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def kept_path(log_id: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Where this node keeps log ``log_id`` (an id only: ``UnknownLog`` for anything else)."""
    # sitlpool.logs loads pymavlink's DFReader (~0.4 s): only on a node asked for a log
    from ..logs import LogStore

    return LogStore(data_dir).path(log_id)


def kept_chunk(log_id: str, offset: int, size: int) -> bytes:
    """The task pinned to a node: a chunk of a log that node keeps (its own settings' data dir)."""
    from ..config import load_settings

    return read_chunk(kept_path(log_id, load_settings().data_dir), offset, size)


def kept_records(ids: list[str]) -> list[dict]:
    """The task pinned to a node: the current records of the logs it keeps with these ids
    (pinned state, path); ids no longer kept (pruned) are left out."""
    from ..config import load_settings
    from ..logs import LogError, LogStore

    store = LogStore(load_settings().data_dir)
    out = []
    for i in ids:
        try:
            out.append(store.get(i).as_dict())
        except LogError:
            continue
    return out


def fetch(read: Callable[[int, int], bytes], name: str, dest_dir: str | os.PathLike, size: int | None = None) -> Path:
    """Copy a log to ``dest_dir/name`` through ``read(offset, size)``, a chunk at a time:
    written to a temporary name and renamed once whole, so a failed copy leaves nothing
    that looks like a log. ``size``: the size expected (a live log may have grown since)."""
    if not name or os.path.basename(name) != name or name.startswith("."):
        raise SitlpoolError(f"{name!r} is not a log file name")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    final = dest / name
    tmp = dest / f".{name}.part"
    got = 0
    try:
        with open(tmp, "wb") as f:
            while True:
                data = read(got, CHUNK)
                if not data:
                    break
                f.write(data)
                got += len(data)
                if len(data) < CHUNK:
                    break
        if size is not None and got < size:
            raise SitlpoolError(f"log {name}: got {got} of its {size} bytes; it changed or went away meanwhile")
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    return final


# ---- on the driver -----------------------------------------------------------------------


def _pinned(fn, node_id: str):
    import ray  # the driver has Ray (it runs a Fleet); imported here so a node's worker need not at import
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(num_cpus=0, max_retries=0)(fn).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    )


def on_node(node_id: str, fn, *args, timeout: float = 60.0):
    """``fn(*args)`` run as a small task on node ``node_id``; a node gone is one FleetError line."""
    import ray

    from .errors import FleetError
    from .raywrap import ray_reason, unwrap

    try:
        return ray.get(_pinned(fn, node_id).remote(*args), timeout=timeout)
    except ray.exceptions.RayTaskError as e:
        raise unwrap(e) from None
    except ray.exceptions.GetTimeoutError:
        raise FleetError(f"node {node_id[:8]}: no answer about its logs within {timeout:g}s") from None
    except ray.exceptions.RayError as e:
        raise FleetError(f"node {node_id[:8]} cannot be asked for its logs: {ray_reason(e)[:300]}") from None


def session_records(session_id: str) -> list[dict]:
    """The task pinned to a node: the records of the logs it keeps for a session."""
    from ..config import load_settings
    from ..logs import LogStore

    return [r.as_dict() for r in LogStore(load_settings().data_dir).list(session=session_id)]


def fetch_kept(node_id: str, log_id: str, dest_dir: str | os.PathLike) -> Path:
    """Copy the log ``log_id`` that node ``node_id`` keeps to ``dest_dir/<id>.BIN`` (or .tlog)."""
    [rec] = on_node(node_id, kept_records, [log_id]) or [None]
    if rec is None:
        from ..logs import UnknownLog

        raise UnknownLog(f"node {node_id[:8]} keeps no log {log_id!r} (pruned, or never kept there)")
    name = f"{log_id}{'.tlog' if rec['kind'] == 'tlog' else '.BIN'}"
    return fetch(lambda off, n: on_node(node_id, kept_chunk, log_id, off, n), name, dest_dir, rec["size"])


class FlightResult:
    """One ``map(..., keep_logs=True)`` item's result with where it flew and the logs its
    flight left on that node: ``result`` (what ``fn`` returned), ``node_id``, ``host``,
    ``instance``, ``logs`` (their records) and ``log_ids``; ``Fleet.fetch_log(node_id, id,
    dest_dir)`` copies one here."""

    def __init__(self, index: int, result, info: dict):
        self.index = index
        self.result = result
        self.node_id: str | None = info.get("node_id")
        self.host: str | None = info.get("host")
        self.instance: int | None = info.get("instance")
        self.logs: list[dict] = list(info.get("logs") or [])

    @property
    def log_ids(self) -> list[str]:
        return [r["id"] for r in self.logs]

    def __repr__(self) -> str:
        return (
            f"<FlightResult {self.index} on {self.host} instance {self.instance} logs={self.log_ids} {self.result!r}>"
        )
