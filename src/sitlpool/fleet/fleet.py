"""``Fleet``: SITLs placed on a Ray cluster. Ray places (each node advertises ``sitl`` =
its pool size); the node's flock leases still decide, so a slot Ray counts as free but a
SITL started outside sitlpool holds is refused there and placement goes elsewhere."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.util import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from ..config import ValidatedSettings
from ..errors import LeaseError, SitlpoolError
from ..flight import check_finite, resolve_binary
from ..sessions import check_open_args
from . import connection, logfetch, node
from .errors import FleetError, ItemFailed, NoRoom
from .launch import DEFAULT_MODEL, launch_options
from .logfetch import FlightResult
from .progress import MapProgress, node_key
from .remote import RemoteSitl, ray_reason, unwrap
from .resources import RESOURCE, ray_resources

log = logging.getLogger("sitlpool.fleet")
START_TIMEOUT_S = 120.0  # an actor placed on a node, to its SITL ready (worker start + launch)
SLOT_GRACE_S = 2.0  # open(wait_s=0): how long reserving a free slot may take (no worker starts for it)
WATCH_S = 1.0  # while SITLs are open: how often the fleet asks Ray which nodes are alive and pings its actors


def _remote(cls_or_fn, **options):
    return ray.remote(**options)(cls_or_fn) if options else ray.remote(cls_or_fn)


class Fleet:
    """A connection to a Ray cluster (``address``: ``HOST:PORT`` of its head, or None for a
    Ray of this machine alone, started with this machine's ``sitl`` resource)."""

    def __init__(self, address: str | None = None, *, log_to_driver: bool = False):
        self._closed = False
        connection.connect(address, log_to_driver)
        self.address = address
        self._actor_cls = _remote(node.SitlActor, max_concurrency=node.ACTOR_CONCURRENCY, max_restarts=0)
        self._slot_cls = _remote(node.Slot)
        self._open: set[RemoteSitl] = set()
        self._open_lock = threading.Lock()
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._settings_refs: dict[Any, str] = {}  # node_settings task -> the node it reads
        self._settings: dict[str, dict] = {}  # node id -> its settings_values, once read
        self._settings_total = 0.0  # the cluster's sitl slots when the nodes were last listed
        self._settings_lock = threading.Lock()
        self._read_settings(self.capacity()[0])

    def _read_settings(self, total: float) -> None:
        """Start reading the settings of each live node not read yet (one task pinned per
        node, not waited for). An actor placed on a node whose values are in is handed
        them, so its fresh process skips importing pydantic-settings; on a node not read
        yet (or whose settings are bad) the actor reads its own, and says what is wrong.
        Called again when the cluster's slot count changes (a node joined or left)."""
        with self._settings_lock:  # opens run on many threads at once (the pytest plugin, serve)
            if total == self._settings_total:
                return
            self._settings_total = total
            fn = _remote(node.node_settings, num_cpus=0, max_retries=0)
            asked = set(self._settings_refs.values()) | set(self._settings)
            for n in self.nodes():
                if n[RESOURCE] >= 1 and n["node_id"] not in asked:
                    self._settings_refs[fn.options(scheduling_strategy=_on_node(n["node_id"])).remote()] = n["node_id"]

    def _node_settings(self, wait_s: float = 0) -> dict[str, dict]:
        """The node settings read so far (waiting up to ``wait_s`` for the rest)."""
        refs = list(self._settings_refs)
        if refs:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
            for ref in done:
                nid = self._settings_refs.pop(ref, None)
                if nid is None:  # another thread took it in
                    continue
                try:
                    self._settings[nid] = ray.get(ref)[1]
                except ray.exceptions.RayError:  # bad settings or a lost node: the actor reads its own
                    pass
        return dict(self._settings)

    def _check_model(self, model: str, wait_s: float = 0) -> None:
        """Refuse a model no node can fly, before anything is placed: when every node's
        settings are in and every node runs the built-in vehicle (a node with a real
        SITL binary is left to say for itself: its files are not on this machine)."""
        known = self._node_settings(wait_s)
        if not known or any(v["sitl_binary"] is not None for v in known.values()):
            return
        try:
            resolve_binary(ValidatedSettings(next(iter(known.values()))), model)  # the built-in vehicle's answer
        except SitlpoolError:
            # only then ask Ray for the live nodes (a GCS call kept off open's usual path): a
            # node not read yet may run a real SITL that flies it
            live = {n["node_id"] for n in self.nodes() if n[RESOURCE] >= 1}
            if live and live <= set(known) and all(known[n]["sitl_binary"] is None for n in live):
                raise

    # ---- the cluster ---------------------------------------------------------------------

    def nodes(self) -> list[dict]:
        """Live nodes: ``node_id``, ``host``, ``sitl`` (slots advertised)."""
        return [
            {"node_id": n["NodeID"], "host": n["NodeManagerAddress"], RESOURCE: n["Resources"].get(RESOURCE, 0)}
            for n in ray.nodes()
            if n["Alive"]
        ]

    def capacity(self) -> tuple[float, float]:
        """(slots in the cluster, slots free now) as Ray counts them."""
        return ray.cluster_resources().get(RESOURCE, 0), ray.available_resources().get(RESOURCE, 0)

    def _need_capacity(self) -> float:
        total, _ = self.capacity()
        if total < 1:
            raise FleetError(
                f"no node of the Ray cluster at {self.address or 'this machine'} offers the {RESOURCE!r} "
                'resource; start each node with ray start --resources "$(sitlpool ray-resources)"'
            )
        return total

    # ---- one SITL --------------------------------------------------------------------

    def open(
        self,
        model: str = DEFAULT_MODEL,
        speedup: float | None = None,
        params: dict | None = None,
        home: str | None = None,
        label: str | None = None,
        wait_s: float | None = None,
        wipe: bool | None = None,
        *,
        preset: str | None = None,
        param_files: list | None = None,
        scripts: list | None = None,
        wind: dict | None = None,
        tlog: bool = False,
    ) -> RemoteSitl:
        """A SITL launched on whichever node has room, as a ``RemoteSitl``. ``wait_s``: how
        long to wait for a free slot (None: as long as it takes; 0: fail at once).
        ``preset``: a preset of this machine (``sitlpool presets``), under the options given;
        ``param_files`` (paths here) and ``scripts`` (names in this machine's
        ``SITLPOOL_SCRIPTS_DIR``) travel to the node by content; ``wind`` as ``open_sitl``'s."""
        self._check_usable()
        o = launch_options(preset, model, speedup, params, home, label, wipe, param_files, scripts, wind)
        model, speedup, label, home, params = check_open_args(
            o["model"], 1 if o["speedup"] is None else o["speedup"], o["label"], o["home"], o["params"]
        )
        if wait_s is not None:
            wait_s = max(0.0, check_finite(wait_s, "wait_s", unit="s"))
        total = self._need_capacity()
        self._read_settings(total)
        self._check_model(model)
        launch: dict[str, Any] = dict(
            model=model, speedup=speedup, params=params, home=home, label=label, wipe=o["wipe"]
        )
        if o["files"]:
            launch["files"] = o["files"]
        if o["wind"]:
            launch["wind"] = o["wind"]
        if tlog:
            launch["tlog"] = True
        deadline = None if wait_s is None else time.monotonic() + wait_s
        refused_slots: list = []  # slots kept on nodes that refused, so Ray places the next one elsewhere
        refused = None
        try:
            while True:
                # the slot is reserved first (no worker starts for that): whether there is room
                # is known at once, even with other callers racing for the last slot
                slot = placement_group([{RESOURCE: 1}])
                left = None if deadline is None else max(SLOT_GRACE_S, deadline - time.monotonic())
                done, _ = ray.wait([slot.ready()], timeout=left)
                if not done:
                    remove_placement_group(slot)
                    raise NoRoom(self._no_room(total, wait_s, refused))
                actor = None
                try:
                    actor = self._actor_cls.options(
                        resources={RESOURCE: 1},
                        num_cpus=0,
                        scheduling_strategy=PlacementGroupSchedulingStrategy(slot, placement_group_bundle_index=0),
                    ).remote(self._node_settings(), launch)
                    ray.get(actor.ready.remote(), timeout=START_TIMEOUT_S)
                    info = ray.get(actor.open.remote(), timeout=START_TIMEOUT_S)
                except BaseException as e:  # whatever went wrong, the slot and the actor go (KeyboardInterrupt too)
                    if actor is not None:
                        ray.kill(actor)
                    remove_placement_group(slot)
                    if isinstance(e, ray.exceptions.RayTaskError):
                        raise unwrap(e) from None
                    if isinstance(e, ray.exceptions.GetTimeoutError):
                        raise FleetError(
                            f"the SITL's actor was not ready within {START_TIMEOUT_S:g}s of being placed; "
                            "the node may be overloaded (fleet.status() shows the cluster)"
                        ) from None
                    if isinstance(e, ray.exceptions.RayError):
                        raise FleetError(
                            f"the actor for a new SITL died while starting: {ray_reason(e)}; try again"
                        ) from None
                    raise
                if "refused" in info:
                    log.info("node %s refused a lease: %s; placing elsewhere", info["host"], info["refused"])
                    ray.kill(actor)
                    refused_slots.append(slot)
                    refused = f"{info['host']} (node {info['node_id'][:8]}): {info['refused']}"
                    if len(refused_slots) >= total:
                        raise NoRoom(
                            f"every node Ray placed the SITL on refused a lease (last: {info['host']}: "
                            f"{info['refused']}); SITLs started outside sitlpool hold the instances Ray counts as free"
                        )
                    continue
                sitl = RemoteSitl(actor, info, self, slot)
                self._opened(sitl)
                return sitl
        finally:
            for slot in refused_slots:
                remove_placement_group(slot)

    def _no_room(self, total: float, waited: float | None, refused: str | None = None) -> str:
        how = "at once (wait_s=0)" if not waited else f"within {waited:g}s"
        msg = (
            f"no node of the cluster had a free sitl slot {how}: all {total:g} are in use; "
            "close a SITL, wait (wait_s=None waits as long as it takes), or add nodes"
        )
        if refused:
            msg += (
                f"; a slot Ray counted as free was refused by its node's lease, {refused} "
                "(a SITL started outside sitlpool holds an instance there)"
            )
        return msg

    def _opened(self, sitl: RemoteSitl) -> None:
        with self._open_lock:
            self._open.add(sitl)
            if self._watcher is None and not self._closed:
                self._watcher = threading.Thread(target=self._watch_nodes, name="sitlpool-fleet-nodes", daemon=True)
                self._watcher.start()

    def _forget(self, sitl: RemoteSitl) -> None:
        with self._open_lock:
            self._open.discard(sitl)

    def _watch_nodes(self) -> None:
        """While SITLs are open, every ``WATCH_S``: which nodes Ray counts alive (one GCS
        call), and a ping of each handle's actor (answered, or failed when the actor died). A
        handle whose node or actor died says died at once and gives back its sitl slot, which
        Ray would otherwise keep reserved (re-placed on a surviving node when the node died)
        until the handle's owner next calls it: other drivers meanwhile told "all in use"."""
        pings: dict[RemoteSitl, Any] = {}
        while not self._watch_stop.wait(WATCH_S):
            with self._open_lock:
                handles = list(self._open)
            for h in list(pings):
                if h not in handles:
                    del pings[h]
            if not handles:
                continue
            try:
                alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
                for h in handles:
                    if h not in pings:
                        pings[h] = h._actor.ready.remote()
                done, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=0)
            except Exception as e:  # the connection is going (shutdown, head lost): try again next time
                log.debug("cannot watch the cluster: %s", e)
                continue
            answered = set(done)
            for h in handles:
                why = None
                if alive and h.node_id not in alive:  # an empty answer is the connection's trouble
                    why = f"its node {h.node_id[:8]} ({h.host}) died (Ray reports the node dead)"
                elif h in pings and pings[h] in answered:
                    try:
                        ray.get(pings.pop(h), timeout=0)
                    except ray.exceptions.ActorDiedError as e:
                        why = f"its actor died: {ray_reason(e)}"
                    except ray.exceptions.RayError:  # unavailable for now (a network hiccup): asked again
                        pass
                if why is not None and h.lost(why):
                    log.warning("%s on %s: %s; its sitl slot is given back", h.label, h.host, why)
                    self._forget(h)

    # ---- many scenarios --------------------------------------------------------------------

    def map(
        self,
        fn,
        items,
        model: str = DEFAULT_MODEL,
        speedup: float | None = None,
        retries: int = 1,
        params: dict | None = None,
        home: str | None = None,
        progress: bool | None = None,
        label: str | None = None,
        keep_logs: bool = False,
        *,
        preset: str | None = None,
        param_files: list | None = None,
        scripts: list | None = None,
        wind: dict | None = None,
    ) -> list:
        """``fn(sitl, item)`` for each item on a SITL leased on whichever node has room; the
        results in item order. An exception in ``fn`` is that item's result (an
        ``ItemFailed`` with the vehicle's last STATUSTEXTs and the SITL's stderr tail); an
        item lost with its node is run again elsewhere, up to ``retries`` times.
        ``keep_logs``: each result is a ``FlightResult`` (``result``, ``node_id``, ``host``,
        ``log_ids``, ``logs``) and each ``ItemFailed`` has ``logs``; ``fetch_log`` copies one here."""
        # what every item shares is checked once, here: not a batch of identical failures
        opts = self.item_options(
            model,
            speedup,
            params,
            home,
            label,
            keep_logs,
            preset=preset,
            param_files=param_files,
            scripts=scripts,
            wind=wind,
        )
        total = self._settings_total  # the cluster's slots, as item_options just counted them
        items = list(items)
        task = _remote(node.run_item, num_cpus=0, max_retries=0, resources={RESOURCE: 1})
        show = progress if progress is not None else _stderr_is_terminal()
        tally = _remote(node.Tally, num_cpus=0).remote() if show else None
        try:
            fn_ref = ray.put(fn)  # shipped once, not once per item
        except Exception as e:  # pickling: Ray's own message is a many-line dump
            if tally is not None:
                ray.kill(tally)
            raise FleetError(
                f"the function {getattr(fn, '__name__', fn)!r} cannot be sent to the nodes "
                f"({type(e).__name__}: {ray_reason(e)[:200]}); define it at the top of a module or "
                "script, using only what can be pickled"
            ) from None
        results: list = [None] * len(items)
        pending: dict = {}
        attempts = [0] * len(items)
        slots: list = []
        bar = MapProgress(len(items), enabled=show)

        def submit(i: int) -> None:
            attempts[i] += 1
            try:
                pending[task.remote(fn_ref, items[i], i, opts, tally)] = i
            except Exception as e:  # the item cannot be pickled: that item's failure
                fail(i, "Unpicklable", f"item {i} cannot be sent to a node ({type(e).__name__}: {ray_reason(e)[:200]})")

        def fail(i: int, kind: str, message: str) -> None:
            results[i] = ItemFailed(i, items[i], {"type": kind, "message": message, "attempts": attempts[i]})
            bar.finished(i, None, ok=False)

        try:
            for i in range(len(items)):
                submit(i)
            with bar:
                while pending:
                    done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    if tally is not None:
                        bar.running(ray.get(tally.where.remote()), set(pending.values()))
                    for ref in done:
                        i = pending.pop(ref)
                        try:
                            out = ray.get(ref)
                        except ray.exceptions.RayTaskError as e:  # e.g. a result that cannot be pickled
                            cause = unwrap(e)
                            results[i] = ItemFailed(
                                i,
                                items[i],
                                {"type": type(cause).__name__, "message": ray_reason(cause), "attempts": attempts[i]},
                            )
                            bar.finished(i, None, ok=False)
                            continue
                        except ray.exceptions.RayError as e:  # its worker or node died
                            if attempts[i] <= retries:
                                log.warning("item %d lost (%s); running it again elsewhere", i, ray_reason(e))
                                bar.lost(i)
                                submit(i)
                            else:
                                results[i] = ItemFailed(
                                    i,
                                    items[i],
                                    {"type": "Lost", "message": f"died: {ray_reason(e)}", "attempts": attempts[i]},
                                )
                                bar.finished(i, None, ok=False)
                            continue
                        if out["kind"] == "refused":
                            # Ray's count for that node was one too high: hold a slot there meanwhile
                            log.info(
                                "node %s refused a lease: %s; placing item %d elsewhere", out["host"], out["message"], i
                            )
                            slots.append(
                                self._slot_cls.options(
                                    resources={RESOURCE: 1}, num_cpus=0, scheduling_strategy=_on_node(out["node_id"])
                                ).remote()
                            )
                            if len(slots) >= total:  # every slot is refused: nothing waiting could ever run
                                why = (
                                    f"every sitl slot of the cluster was refused by its node's lease (last: {out['host']}: "
                                    f"{out['message']}); SITLs started outside sitlpool hold the instances Ray counts as free"
                                )
                                fail(i, "NoRoom", why)
                                for ref, j in list(pending.items()):
                                    ray.cancel(ref, force=True)
                                    del pending[ref]
                                    fail(j, "NoRoom", why)
                                continue
                            attempts[i] -= 1
                            submit(i)
                            continue
                        if out["kind"] == "ok":
                            results[i] = FlightResult(i, out["result"], out) if keep_logs else out["result"]
                        else:
                            results[i] = ItemFailed(i, items[i], {**out, "attempts": attempts[i]})
                        bar.finished(i, node_key(out["host"], out["node_id"]), ok=out["kind"] == "ok")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            for a in slots + ([tally] if tally is not None else []):
                ray.kill(a)
        return results

    def item_options(
        self,
        model: str = DEFAULT_MODEL,
        speedup: float | None = None,
        params: dict | None = None,
        home: str | None = None,
        label: str | None = None,
        keep_logs: bool = False,
        *,
        preset: str | None = None,
        param_files: list | None = None,
        scripts: list | None = None,
        wind: dict | None = None,
    ) -> dict:
        """The launch options of an item as ``map`` sends them to its nodes (``map``'s
        arguments, checked: a bad value is one error), also for a ``SlotPool`` job."""
        self._check_usable()
        o = launch_options(preset, model, speedup, params, home, label, None, param_files, scripts, wind)
        speedup = o["speedup"]
        model, checked, label, home, params = check_open_args(
            o["model"], 1 if speedup is None else speedup, o["label"], o["home"], o["params"]
        )
        self._read_settings(self._need_capacity())
        self._check_model(model, wait_s=10)  # a batch can wait for the nodes' settings
        opts = {
            "model": model,
            "speedup": None if speedup is None else checked,
            "params": params,
            "home": home,
            "label": label,
            "wipe": o["wipe"],
        }
        if o["files"]:
            opts["files"] = o["files"]
        if keep_logs:
            opts["keep_logs"] = True
        return opts

    def fetch_log(self, node_id: str, log_id: str, dest_dir) -> Path:
        """Copy a log that node ``node_id`` keeps (a ``FlightResult``'s ``node_id`` and one of
        its ``log_ids``) to ``dest_dir``; the path of the copy."""
        self._check_usable()
        return logfetch.fetch_kept(node_id, log_id, dest_dir)

    # ---- the cluster's view ------------------------------------------------------------------

    def status(self, all: bool = False, timeout: float = 90.0) -> dict:
        """Every node's local status document (leases, SITLs running without a lease),
        gathered by one task pinned to each node, and their rows with the node in each."""
        self._check_usable()
        fn = _remote(node.node_status, num_cpus=0, max_retries=0)
        nodes = self.nodes()
        refs = {n["node_id"]: fn.options(scheduling_strategy=_on_node(n["node_id"])).remote(all) for n in nodes}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        rows: list[dict] = []
        held: list[dict] = []
        unleased: list[dict] = []
        for n in nodes:
            entry: dict[str, Any] = {"node_id": n["node_id"], "host": n["host"], RESOURCE: n[RESOURCE]}
            try:
                d = ray.get(refs[n["node_id"]], timeout=0)
            except ray.exceptions.GetTimeoutError:
                entry["error"] = f"no answer within {timeout:g}s"
            except ray.exceptions.RayError as e:
                entry["error"] = ray_reason(unwrap(e))
            else:
                entry.update(lock_dir=d["lock_dir"], pool=d["pool"], free_count=d["free_count"], status=d)
                where = {"node_id": n["node_id"], "host": n["host"]}
                held += [{**where, **h} for h in d["held"]]
                unleased += [{**where, **r} for r in d["running_without_lease"]]
            rows.append(entry)
        return {"schema": 1, "address": self.address, "nodes": rows, "held": held, "running_without_lease": unleased}

    def close_all(self) -> None:
        """Close every SITL this fleet opened and still holds."""
        with self._open_lock:
            handles = list(self._open)
        for s in handles:
            try:
                s.close()
            except SitlpoolError:  # pragma: no cover - best effort
                pass

    def close(self) -> None:
        """Close every SITL this fleet opened; the last ``Fleet`` of the process to close
        stops the Ray connection a ``Fleet`` started (one the caller made is left alone)."""
        if self._closed:
            return
        self.close_all()
        with self._open_lock:
            self._closed = True
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(WATCH_S + 5)  # a GCS call under way finishes first (not one hung on a lost head)
        connection.disconnect()

    def _check_usable(self) -> None:
        if self._closed:
            raise FleetError("this Fleet was closed; make a new one (Fleet(address)) to place more SITLs")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _on_node(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


__all__ = ["Fleet", "FleetError", "ItemFailed", "LeaseError", "NoRoom", "RemoteSitl", "ray_resources"]
