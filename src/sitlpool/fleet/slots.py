"""One long-lived actor per node for a stream of runs: ``SlotPool`` holds the free ``sitl``
slots of each node with one ``NodeSlots`` actor there (``num_cpus=0``, pinned to the node,
threaded: one thread per slot, plus one for control calls), and runs each job in it with
the body of a ``map`` item (``node.run_item``: lease from the node's pool, launch, ``fn``,
stop, keep logs). Ray starts a node's worker processes a few at a time (as many as the CPUs
it announces), so a task per run pays for one worker per slot; the pool pays for one worker
per node, and every node starts its one at once.

``SlotPool.run_all`` feeds the jobs from one queue to a thread per slot, each taking the
next job as soon as its last one came back. A job lost with its actor (its worker or node
died) goes back to the queue for a live node (up to ``retries`` more times) and comes back
once, with its attempts; a job a node's lease refused (Ray counted a slot free that a SITL
started outside sitlpool holds) goes back too, and that slot flies no more. Jobs no slot is
left for are returned, for the caller to fly another way (``Fleet.map``). ``abort`` stops the
jobs in flight (an item that is a dict with an ``abort`` key gets the actor's abort event
there); ``close`` kills every actor: their SITLs exit with them, the kernel drops their
leases, Ray frees their slots."""

from __future__ import annotations

import collections
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray._private import state as ray_state  # available_resources_per_node: a Ray DeveloperAPI, no public twin
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from . import node
from .remote import ray_reason, unwrap
from .resources import RESOURCE

log = logging.getLogger("sitlpool.fleet.slots")
READY_TIMEOUT_S = (
    60.0  # an actor placed on a node to its worker started (one whose slots were taken meanwhile never starts)
)


class NodeSlots:
    """The actor on one node: imports ``modules`` in its constructor (the worker's start and
    those imports, once), then runs jobs (``run``) one per thread."""

    def __init__(self, modules: list[str]):
        for m in modules:
            importlib.import_module(m)
        self.ident = {**node.node_identity(), "pid": os.getpid()}
        self._abort = threading.Event()

    def ready(self) -> dict:
        return self.ident

    def run(self, fn, item, index: int, opts: dict) -> dict:
        """``node.run_item`` in this worker: its outcome, with this worker's ``pid``."""
        if isinstance(item, dict) and "abort" in item:
            item = {**item, "abort": self._abort}
        if self._abort.is_set():
            return {"kind": "aborted", **self.ident}
        return {**node.run_item(fn, item, index, opts), "pid": self.ident["pid"]}

    def abort(self) -> None:
        self._abort.set()


class _Node:
    """The driver's side of one node's actor: its slots and whether it started."""

    def __init__(self, actor: Any, node_id: str, slots: int):
        self.actor, self.node_id, self.slots = actor, node_id, slots
        self.started = threading.Event()
        self.ident: dict | None = None
        self.dead: str | None = None


class SlotPool:
    """Actors holding up to ``n`` free ``sitl`` slots of the cluster, spread over its nodes."""

    def __init__(self, n: int, modules: list[str] | tuple = (), ready_timeout_s: float = READY_TIMEOUT_S):
        t0 = time.monotonic()
        self.nodes: list[_Node] = []
        self._closed = False
        cls = ray.remote(NodeSlots)
        try:
            for node_id, k in _spread(n, free_slots()).items():
                actor = cls.options(
                    num_cpus=0,
                    resources={RESOURCE: k},
                    max_concurrency=k + 1,  # a thread per slot, one for ready/abort
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                ).remote(list(modules))
                self.nodes.append(_Node(actor, node_id, k))
        except BaseException:  # none of them left behind
            self._closed = True
            for made in self.nodes:
                ray.kill(made.actor)
            raise
        self.ready_s: float | None = None
        self._t0 = t0
        self._starter = threading.Thread(
            target=self._start, args=(ready_timeout_s,), name="slot-pool-start", daemon=True
        )
        self._starter.start()

    @property
    def size(self) -> int:
        return sum(n.slots for n in self.nodes)

    def _start(self, timeout_s: float) -> None:
        """Every node's actor started at once; each node's slots fly as soon as its own is up.
        One not up within ``timeout_s`` (its slots taken by another user meanwhile, the node
        overloaded) is killed: its slots fly nothing."""
        refs = {n.actor.ready.remote(): n for n in self.nodes}
        pending = list(refs)
        deadline = time.monotonic() + timeout_s
        while pending and not self._closed:
            done, pending = ray.wait(pending, num_returns=1, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            for ref in done:
                n = refs[ref]
                try:
                    n.ident = ray.get(ref)
                except ray.exceptions.RayError as e:
                    n.dead = f"its actor did not start: {ray_reason(unwrap(e))}"
                n.started.set()
            if time.monotonic() >= deadline:
                break
        for ref in pending:
            n = refs[ref]
            n.dead = f"its actor was not started within {timeout_s:g}s"
            ray.kill(n.actor)
            n.started.set()
        self.ready_s = round(time.monotonic() - self._t0, 3)

    def info(self) -> dict:
        """For the record: the nodes, their slots, the workers that ran, how long their start took."""
        self._starter.join(0)
        return {
            "start_s": self.ready_s,
            "nodes": len(self.nodes),
            "slots": self.size,
            "workers": sum(1 for n in self.nodes if n.ident is not None),
            "failed": {n.node_id[:8]: n.dead for n in self.nodes if n.dead and n.ident is None},
        }

    def run_all(
        self,
        fn: Callable,
        jobs: list[tuple[int, Any, dict]],
        done: Callable[[int, dict, int, float], None],
        retries: int = 2,
        abort: threading.Event | None = None,
    ) -> list[tuple[int, Any, dict]]:
        """Fly ``jobs`` (``(index, item, opts)``: opts as ``Fleet.item_options`` gives) on the
        slots; ``done(index, out, attempts, t0)`` for each as it comes back (``out``:
        ``run_item``'s outcome with the worker's ``pid`` and ``sent``, the wall clock when its
        last attempt was sent; or ``kind`` "lost" with ``message`` when it was lost ``retries +
        1`` times, or "aborted"; ``t0``: ``time.monotonic()`` when its first attempt was sent).
        The jobs no slot was left for, in order (none when every job came back)."""
        abort = abort or threading.Event()
        todo: collections.deque = collections.deque((key, item, opts, 0, None) for key, item, opts in jobs)
        changed = threading.Condition()
        flying = [0]  # jobs in flight: one may come back to the queue (lost with its node)

        def take(n: _Node):
            """The next job; None when none is left (none queued, none in flight that could
            come back), on abort, or once this slot's actor is gone."""
            with changed:
                while not todo or n.dead:
                    if not flying[0] or abort.is_set() or self._closed or n.dead:
                        return None
                    changed.wait(0.25)
                flying[0] += 1
                return todo.popleft()

        def back(job, put: bool) -> None:
            with changed:
                flying[0] -= 1
                if put:
                    todo.appendleft(job)
                changed.notify_all()

        def slot(n: _Node) -> None:
            while not n.started.wait(0.25):  # its actor starting: nothing to wait for once every job is done
                with changed:
                    if (not todo and not flying[0]) or abort.is_set() or self._closed:
                        return
            while n.ident is not None and not abort.is_set() and not self._closed:
                job = take(n)
                if job is None:
                    return
                key, item, opts, lost, t0 = job
                t0 = time.monotonic() if t0 is None else t0
                sent = time.time()
                try:
                    out = {**ray.get(n.actor.run.remote(fn, item, key, opts)), "sent": sent}
                except ray.exceptions.RayError as e:
                    if isinstance(e, ray.exceptions.RayTaskError) and not isinstance(
                        e, ray.exceptions.ActorDiedError | ray.exceptions.ActorUnavailableError
                    ):
                        cause = unwrap(e)  # e.g. a result that cannot be pickled: the job's own failure
                        done(
                            key,
                            {"kind": "error", "type": type(cause).__name__, "message": ray_reason(cause)},
                            lost + 1,
                            t0,
                        )
                        back(job, False)
                        continue
                    why = ray_reason(e)
                    n.dead = n.dead or why
                    if abort.is_set() or self._closed:
                        done(key, {"kind": "aborted", "message": f"aborted: {why}"}, lost + 1, t0)
                        back(job, False)
                    elif lost < retries:
                        log.warning("run %s lost with node %s (%s); flying it again elsewhere", key, n.node_id[:8], why)
                        back((key, item, opts, lost + 1, t0), True)
                    else:
                        done(key, {"kind": "lost", "message": f"died: {why}"}, lost + 1, t0)
                        back(job, False)
                    return  # this slot's actor is gone
                if out["kind"] == "refused":
                    log.info("node %s refused a lease: %s; flying run %s elsewhere", n.node_id[:8], out["message"], key)
                    back((key, item, opts, lost, t0), True)
                    return  # this slot is held by someone else's SITL: it flies no more
                try:
                    done(key, out, lost + 1, t0)
                finally:
                    back(job, False)

        threads = [
            threading.Thread(target=slot, args=(n,), name=f"slot {n.node_id[:8]}.{i}", daemon=True)
            for n in self.nodes
            for i in range(n.slots)
        ]
        for t in threads:
            t.start()
        aborted = False
        for t in threads:
            while t.is_alive():
                t.join(0.25)
                if abort.is_set() and not aborted:  # the jobs in flight stop (their steps end, their SITLs stop)
                    aborted = True
                    self.abort()
        return [(key, item, opts) for key, item, opts, _lost, _t0 in todo]

    def abort(self) -> None:
        for n in self.nodes:
            if n.ident is not None:
                try:
                    n.actor.abort.remote()
                except ray.exceptions.RayError:  # pragma: no cover - gone already
                    pass

    def close(self) -> None:
        """Kill every actor (nothing of theirs stays: SITLs, leases, slots)."""
        self._closed = True
        for n in self.nodes:
            try:
                ray.kill(n.actor)
            except Exception as e:  # pragma: no cover - the connection is gone: so are they
                log.debug("kill %s: %s", n.node_id[:8], e)
        self._starter.join(5)

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def free_slots() -> dict[str, int]:
    """Each live node's free ``sitl`` slots now (Ray's count), by node id; nodes with none left out."""
    per_node = ray_state.available_resources_per_node()
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    return {nid: int(r.get(RESOURCE, 0)) for nid, r in per_node.items() if nid in alive and int(r.get(RESOURCE, 0)) > 0}


def _spread(n: int, free: dict[str, int]) -> dict[str, int]:
    """``n`` slots taken from ``free``, one node at a time round the nodes (the freest first)."""
    left = dict(sorted(free.items(), key=lambda kv: -kv[1]))
    out: dict[str, int] = {}
    while n > 0 and any(left.values()):
        for nid in list(left):
            if n == 0:
                break
            if left[nid] > 0:
                left[nid] -= 1
                out[nid] = out.get(nid, 0) + 1
                n -= 1
    return out
