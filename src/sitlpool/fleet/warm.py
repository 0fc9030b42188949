"""Starting the Ray worker processes of a fleet's ``sitl`` slots before the work that needs
them: a task on a slot runs in a worker process of its node, and Ray starts a node's worker
processes a few at a time (``worker_maximum_startup_concurrency``: the node's CPU count), so
the first task of each slot would otherwise wait for its worker to start (and import
sitlpool). ``warm`` occupies every slot at once with a task that imports the given modules
and waits at a barrier until all of them run, so each runs in a worker of its own; the
workers stay in their node's pool for the tasks that follow (``Fleet.map``'s items)."""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

import ray

from .resources import RESOURCE

BARRIER_POLL_S = 0.05


class Barrier:
    """Counts the warm tasks that run (an actor: the tasks are on several nodes)."""

    def __init__(self) -> None:
        self.arrived: set[tuple[str, int]] = set()

    def arrive(self, node_id: str, pid: int) -> int:
        self.arrived.add((node_id, pid))
        return len(self.arrived)

    def count(self) -> int:
        return len(self.arrived)


def warm_worker(modules: list[str], barrier, n: int, deadline_s: float) -> dict:
    """In a worker on a slot: import ``modules``, then wait (at most ``deadline_s``) until
    ``n`` warm tasks run, so that no two of them share a worker."""
    t0 = time.monotonic()
    for m in modules:
        importlib.import_module(m)
    node_id = ray.get_runtime_context().get_node_id()
    seen = ray.get(barrier.arrive.remote(node_id, os.getpid()))
    while seen < n and time.monotonic() - t0 < deadline_s:
        time.sleep(BARRIER_POLL_S)
        seen = ray.get(barrier.count.remote())
    return {"node_id": node_id, "pid": os.getpid(), "all": seen >= n}


def warm(n: int, modules: list[str], timeout_s: float = 120.0) -> dict:
    """Start ``n`` slots' worker processes at once (each importing ``modules``); the
    seconds it took and how many distinct workers ran. Never raises for a slow or lost
    node: the work that follows starts its own workers as it would have."""
    t0 = time.monotonic()
    barrier: Any = ray.remote(num_cpus=0)(Barrier).remote()
    task = ray.remote(num_cpus=0, max_retries=0, resources={RESOURCE: 1})(warm_worker)
    refs = [task.remote(list(modules), barrier, n, timeout_s) for _ in range(n)]
    try:
        done, rest = ray.wait(refs, num_returns=len(refs), timeout=timeout_s + 10)
        for r in rest:
            ray.cancel(r, force=True)
        outs = []
        for r in done:
            try:
                outs.append(ray.get(r))
            except ray.exceptions.RayError:  # a node lost meanwhile: its slots warm with their first run
                continue
    finally:
        ray.kill(barrier)
    return {
        "warm_s": round(time.monotonic() - t0, 3),
        "workers": len({(o["node_id"], o["pid"]) for o in outs}),
        "slots": n,
    }
