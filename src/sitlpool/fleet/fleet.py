"""``Fleet``: SITLs placed on a Ray cluster. Ray places (each node advertises ``sitl`` =
its pool size); the node's flock leases still decide, so a slot Ray counts as free but a
SITL started outside sitlpool holds is refused there and placement goes elsewhere."""

from __future__ import annotations

import logging
import os
import threading
import time

from ..errors import LeaseError, SitlpoolError
from .errors import FleetError, ItemFailed, NoRoom
from .remote import RemoteSitl, ray_reason, unwrap

log = logging.getLogger("sitlpool.fleet")
RESOURCE = "sitl"
START_TIMEOUT_S = 120.0  # an actor placed on a node, to its SITL ready (worker start + launch)
SLOT_GRACE_S = 2.0  # open(wait_s=0): how long reserving a free slot may take (no worker starts for it)


def ray_resources(settings=None) -> dict:
    """What this node offers the cluster: ``{"sitl": <instances in its pool>}``."""
    from ..config import load_settings

    s = settings or load_settings()
    return {RESOURCE: len(s.pool)}


def _remote(cls_or_fn, **options):
    import ray

    return ray.remote(**options)(cls_or_fn) if options else ray.remote(cls_or_fn)


class Fleet:
    """A connection to a Ray cluster (``address``: ``HOST:PORT`` of its head, or None for a
    Ray of this machine alone, started with this machine's ``sitl`` resource)."""

    def __init__(self, address: str | None = None, *, log_to_driver: bool = False):
        import ray

        from . import node

        self._node = node
        self._closed = False
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise FleetError(
                f"Ray address {address!r} is blank; give the head's HOST:PORT (ray start --head prints it), "
                "or no address for a Ray of this machine alone"
            )
        with _CONNECTION_LOCK:
            if ray.is_initialized():
                _same_cluster(address)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                kw = dict(logging_level=logging.WARNING, log_to_driver=log_to_driver, namespace="sitlpool")
                try:
                    if address is None:
                        # a Ray of this machine alone listens on loopback only: nothing else can reach it
                        _keep_loopback("127.0.0.1:0")
                        ray.init(resources=ray_resources(), include_dashboard=False, _node_ip_address="127.0.0.1", **kw)
                    else:
                        _keep_loopback(address)
                        _reachable(address)
                        ray.init(address=address, **kw)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise FleetError(
                        f"cannot connect to the Ray cluster at {address}: {' '.join(str(e).split())[:300]}; "
                        "check the head's address (ray start --head prints it) and that it runs"
                    ) from None
                _CONNECTION["started"] = True
            _CONNECTION["users"] += 1
        self.address = address
        self._actor_cls = _remote(node.SitlActor, max_concurrency=node.ACTOR_CONCURRENCY, max_restarts=0)
        self._slot_cls = _remote(node.Slot)
        self._open: set[RemoteSitl] = set()
        self._settings_refs: dict = {}  # node_settings task -> the node it reads
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
            fn = _remote(self._node.node_settings, num_cpus=0, max_retries=0)
            asked = set(self._settings_refs.values()) | set(self._settings)
            for n in self.nodes():
                if n[RESOURCE] >= 1 and n["node_id"] not in asked:
                    self._settings_refs[fn.options(scheduling_strategy=_on_node(n["node_id"])).remote()] = n["node_id"]

    def _node_settings(self, wait_s: float = 0) -> dict[str, dict]:
        """The node settings read so far (waiting up to ``wait_s`` for the rest)."""
        import ray

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
        from ..config import ValidatedSettings
        from ..process.managed import resolve_binary

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
        import ray

        return [
            {"node_id": n["NodeID"], "host": n["NodeManagerAddress"], RESOURCE: n["Resources"].get(RESOURCE, 0)}
            for n in ray.nodes()
            if n["Alive"]
        ]

    def capacity(self) -> tuple[float, float]:
        """(slots in the cluster, slots free now) as Ray counts them."""
        import ray

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
        model: str = "quad",
        speedup: float = 1,
        params: dict | None = None,
        home: str | None = None,
        label: str | None = None,
        wait_s: float | None = None,
        wipe: bool = True,
    ) -> RemoteSitl:
        """A SITL launched on whichever node has room, as a ``RemoteSitl``. ``wait_s``: how
        long to wait for a free slot (None: as long as it takes; 0: fail at once)."""
        import ray
        from ray.util import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from ..flight import check_finite
        from ..sessions import check_open_args

        self._check_usable()
        model, speedup, label, home, params = check_open_args(model, speedup, label, home, params)
        if wait_s is not None:
            wait_s = max(0.0, check_finite(wait_s, "wait_s", unit="s"))
        total = self._need_capacity()
        self._read_settings(total)
        self._check_model(model)
        for h in list(self._open):  # a slot Ray moved off a dead node is given back
            if h._lost_with_node():
                self._forget(h)
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
                    launch = dict(model=model, speedup=speedup, params=params, home=home, label=label, wipe=wipe)
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
                self._open.add(sitl)
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

    def _forget(self, sitl: RemoteSitl) -> None:
        self._open.discard(sitl)

    # ---- many scenarios --------------------------------------------------------------------

    def map(
        self,
        fn,
        items,
        model: str = "quad",
        speedup: float | None = None,
        retries: int = 1,
        params: dict | None = None,
        home: str | None = None,
        progress: bool | None = None,
        label: str | None = None,
    ) -> list:
        """``fn(sitl, item)`` for each item on a SITL leased on whichever node has room; the
        results in item order. An exception in ``fn`` is that item's result (an
        ``ItemFailed`` with the vehicle's last STATUSTEXTs and the SITL's stderr tail); an
        item lost with its node is run again elsewhere, up to ``retries`` times."""
        import ray

        from ..sessions import check_open_args
        from .progress import MapProgress, node_key

        self._check_usable()
        # what every item shares is checked once, here: not a batch of identical failures
        model, checked, label, home, params = check_open_args(
            model, 1 if speedup is None else speedup, label, home, params
        )
        speedup = None if speedup is None else checked
        items = list(items)
        total = self._need_capacity()
        self._read_settings(total)
        self._check_model(model, wait_s=10)  # a batch can wait for the nodes' settings
        opts = {"model": model, "speedup": speedup, "params": params, "home": home, "label": label}
        task = _remote(self._node.run_item, num_cpus=0, max_retries=0, resources={RESOURCE: 1})
        show = progress if progress is not None else _stderr_is_terminal()
        tally = _remote(self._node.Tally, num_cpus=0).remote() if show else None
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
                            results[i] = out["result"]
                        else:
                            results[i] = ItemFailed(i, items[i], {**out, "attempts": attempts[i]})
                        bar.finished(i, node_key(out["host"], out["node_id"]), ok=out["kind"] == "ok")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            for a in slots + ([tally] if tally is not None else []):
                ray.kill(a)
        return results

    # ---- the cluster's view ------------------------------------------------------------------

    def status(self, all: bool = False, timeout: float = 90.0) -> dict:
        """Every node's local status document (leases, SITLs running without a lease),
        gathered by one task pinned to each node, and their rows with the node in each."""
        import ray

        self._check_usable()
        fn = _remote(self._node.node_status, num_cpus=0, max_retries=0)
        nodes = self.nodes()
        refs = {n["node_id"]: fn.options(scheduling_strategy=_on_node(n["node_id"])).remote(all) for n in nodes}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        doc = {"schema": 1, "address": self.address, "nodes": [], "held": [], "running_without_lease": []}
        for n in nodes:
            entry = {"node_id": n["node_id"], "host": n["host"], RESOURCE: n[RESOURCE]}
            try:
                d = ray.get(refs[n["node_id"]], timeout=0)
            except ray.exceptions.GetTimeoutError:
                entry["error"] = f"no answer within {timeout:g}s"
            except ray.exceptions.RayError as e:
                entry["error"] = ray_reason(unwrap(e))
            else:
                entry.update(lock_dir=d["lock_dir"], pool=d["pool"], free_count=d["free_count"], status=d)
                where = {"node_id": n["node_id"], "host": n["host"]}
                doc["held"] += [{**where, **h} for h in d["held"]]
                doc["running_without_lease"] += [{**where, **r} for r in d["running_without_lease"]]
            doc["nodes"].append(entry)
        return doc

    def close_all(self) -> None:
        """Close every SITL this fleet opened and still holds."""
        for s in list(self._open):
            try:
                s.close()
            except SitlpoolError:  # pragma: no cover - best effort
                pass

    def close(self) -> None:
        """Close every SITL this fleet opened; the last ``Fleet`` of the process to close
        stops the Ray connection a ``Fleet`` started (one the caller made is left alone)."""
        import ray

        if self._closed:
            return
        self.close_all()
        self._closed = True
        with _CONNECTION_LOCK:
            _CONNECTION["users"] -= 1
            if _CONNECTION["users"] <= 0 and _CONNECTION["started"]:
                _CONNECTION.update(users=0, started=False)
                if ray.is_initialized():
                    ray.shutdown()

    def _check_usable(self) -> None:
        if self._closed:
            raise FleetError("this Fleet was closed; make a new one (Fleet(address)) to place more SITLs")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# this process's one connection to Ray (Ray allows one): whether a Fleet started it, and how
# many Fleets use it (the pytest plugin's, a server's and a user's may share it)
_CONNECTION = {"started": False, "users": 0}
_CONNECTION_LOCK = threading.Lock()


def _same_cluster(address: str | None) -> None:
    """A process already connected to Ray can only reach that cluster: an address naming
    another one is an error, not a fleet silently placed elsewhere."""
    if address is None or address == "auto" or "://" in address:
        return
    import ray

    gcs = ray.get_runtime_context().gcs_address or ""
    if _endpoint(address) != _endpoint(gcs):
        raise FleetError(
            f"this process is already connected to the Ray cluster at {gcs}, not {address}; Ray allows one "
            "cluster per process: use that address, or another process for the other cluster"
        )


def _endpoint(address: str) -> tuple[str, str]:
    import socket

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        host = socket.gethostbyname(host)
    except OSError:
        pass
    return host, port


def _reachable(address: str, timeout: float = 5.0) -> None:
    """ray.init retries a head that refuses connections for ever: find out first (a plain
    HOST:PORT only; ``auto``, ``ray://`` and the like are left to Ray)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"nothing answers at {address} ({e.strerror or e})") from None


def _keep_loopback(address: str) -> None:
    """A cluster at a loopback address is one machine's: keep it there. Ray's client swaps a
    loopback address for the machine's routable one (resolve_ip_for_localhost), which finds
    no GCS when the nodes listen on 127.0.0.1 only (ray start --node-ip-address 127.0.0.1)."""
    import ipaddress

    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return
    if loopback:
        import ray._private.services as services

        if hasattr(services, "resolve_ip_for_localhost"):
            services.resolve_ip_for_localhost = lambda h: h


def _on_node(node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


__all__ = ["Fleet", "FleetError", "ItemFailed", "LeaseError", "NoRoom", "RemoteSitl", "ray_resources"]
