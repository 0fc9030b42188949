"""What runs on a node of the cluster, inside Ray's worker processes: the actor behind a
``RemoteSitl`` (a ``Sessions`` of its own: lease, launch and flight through the same code
as the MCP server), the task that runs one ``map`` item on a leased SITL, and the status
task pinned to each node. Everything here reads the node's own settings (SITLPOOL_* of
its ``ray start``): leases stay per host, exactly as without Ray.

The worker process that runs these is the SITL's parent, so a SITL exits with its actor
or task, and the kernel drops its lease with the worker. A lost cluster (its head gone)
is noticed here too: ``ClusterWatch`` stops the SITL and releases its lease within
``LOST_AFTER_S`` of the head's GCS going silent, instead of Ray's own wait (~70 s).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import ray

from .. import world
from ..config import ValidatedSettings, load_settings, settings_values
from ..errors import LeaseError, OwnerError, SitlpoolError
from ..flight import Flight
from ..mavlink.recorder import recorder_for
from ..process import ManagedManager
from ..process.managed import stderr_tail
from ..sessions import FLIGHT_ACTIONS, Session, Sessions
from ..status import pool_status
from ..steps.session_recipes import recipe_of
from ..vehicle import Sitl
from ..world import Pacer, record_open_wind
from . import logfetch
from .launch import NodeFiles, Packed
from .nodesteps import NodeSteps

log = logging.getLogger("sitlpool.fleet.node")

# ``open`` and the flight calls block at most 55 s (sessions.MAX_BLOCK_S); a thread pool
# lets snapshot answer while another caller waits in wait_until
ACTOR_CONCURRENCY = 8
#: the ``sitlpool.world`` functions a driver runs on this node's link (``RemoteLink.world_call``)
WORLD_CALLS = (
    "set_wind",
    "wind_history",
    "record_open_wind",
    "list_failures",
    "inject_failure",
    "clear_failure",
    "set_speedup",
    "sim_time_s",
)
#: the functions of a link (``fn(link, ...)``, plain data back) a driver runs on this node's link
#: (``RemoteLink.on_node``): what the MCP tools run through ``on_link``, by module and name
LINK_CALLS = {
    "sitlpool.mavlink.params": ("get_all", "set_many"),
    "sitlpool.mavlink.mission": ("upload", "download", "clear", "status"),
    "sitlpool.mavlink.rc": ("override",),
    "sitlpool.flight": ("start_mission",),
    "sitlpool.picture": ("of_link",),
}
LOST_AFTER_S = 10.0  # the head's GCS unreachable this long: the cluster is lost, stop the SITL
WATCH_POLL_S = 0.5


def node_identity() -> dict:
    """``node_id`` and ``host`` (the address other machines reach this node at)."""
    return {"node_id": ray.get_runtime_context().get_node_id(), "host": ray.util.get_node_ip_address()}


def connect_strings(host: str, ports) -> dict:
    return {
        "serial1": f"tcp:{host}:{ports.serial1}",
        "serial2": f"tcp:{host}:{ports.serial2}",
        "mavproxy": f"mavproxy.py --master=tcp:{host}:{ports.serial1}",
        "note": "serial0 is sitlpool's own link; each serial port serves one client",
    }


class ClusterWatch:
    """Whether this node still reaches its cluster: a thread connects to the head's GCS every
    ``WATCH_POLL_S``; after ``LOST_AFTER_S`` without a connection, ``on_lost()`` (which stops
    what this worker holds and says what it did) runs once and the loss goes to the
    worker's stderr (Ray's worker-*.err log of the node). Ray itself waits ~70 s for a lost
    head before its raylet ends the workers, and the SITLs and leases with them."""

    def __init__(self, what: str, on_lost: Callable[[], str], lost_after_s: float = LOST_AFTER_S):
        self.what = what
        self.on_lost = on_lost
        self.lost_after_s = lost_after_s
        self.gcs = ray.get_runtime_context().gcs_address or ""
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name="sitlpool-cluster-watch", daemon=True)
        self._thread.start()

    def _reachable(self) -> bool:
        host, _, port = self.gcs.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
            return True
        except (OSError, ValueError):
            return False

    def _run(self) -> None:
        if not self.gcs:
            return
        last_seen = time.monotonic()
        while not self._stop.wait(WATCH_POLL_S):
            if self._reachable():
                last_seen = time.monotonic()
                continue
            silent = time.monotonic() - last_seen
            if silent < self.lost_after_s:
                continue
            self.lost = True
            try:
                done = self.on_lost()
            except Exception as e:  # the loss is still said, with what went wrong
                done = f"stopping it failed: {type(e).__name__}: {e}"
            msg = (
                f"sitlpool fleet node {os.uname().nodename} pid {os.getpid()}: lost the Ray cluster (its head's "
                f"GCS at {self.gcs} unreachable for {silent:.0f}s): {self.what}: {done}"
            )
            log.error("%s", msg)
            print(msg, file=sys.stderr, flush=True)
            return

    def stop(self) -> None:
        self._stop.set()


class SitlActor(NodeSteps):
    """One managed SITL on this node, held for a ``RemoteSitl`` (created with resources={"sitl": 1}).
    Step programs run here too, next to the SITL (``nodesteps.NodeSteps``: steps_start, ...).

    ``settings_by_node``: each node's ``settings_values``, read by ``node_settings`` tasks
    (this process then skips importing pydantic-settings). ``launch``: ``Sessions.open``'s
    arguments. The launch starts on a thread in the constructor, so Ray's own work between
    the constructor and the first call overlaps it; ``open`` collects it. Every other call
    comes after ``open`` (a ``RemoteSitl`` exists only once it returned)."""

    def __init__(self, settings_by_node: dict, launch: dict):
        self.ident = node_identity()
        self.sid: str | None = None
        self._session: Session | None = None  # kept after close: Sessions forgets closed sessions
        self._sessions: Sessions | None = None
        self.watch: ClusterWatch | None = None
        self.files: NodeFiles | None = None  # the parameter files and scripts the launch carried
        self.pacer: Pacer | None = None  # open_sitl(pace=True): this node paces its vehicle
        values = settings_by_node.get(self.ident["node_id"])
        # the launch runs beside Ray's own work after the constructor
        self._launch: concurrent.futures.Future[dict] = concurrent.futures.Future()
        threading.Thread(target=self._open, args=(self._launch, values, launch), name="launch", daemon=True).start()

    def ready(self) -> dict:
        return self.ident

    @property
    def sessions(self) -> Sessions:
        if self._sessions is None:
            raise SitlpoolError("this actor's SITL was not launched; open a new one")
        return self._sessions

    @property
    def session(self) -> Session:
        if self._session is None:
            raise SitlpoolError("this actor's SITL was not launched; open a new one")
        return self._session

    # ---- life ------------------------------------------------------------------------

    def open(self) -> dict:
        """The launch's outcome: this node's session document, or ``refused`` when the
        node's lease refused (an instance Ray counts as free is taken by a SITL started
        outside sitlpool), so the fleet places elsewhere."""
        return self._launch.result()

    def _open(self, out: concurrent.futures.Future, values: dict | None, launch: dict) -> None:
        try:
            settings = ValidatedSettings(values) if values else load_settings()
            launch = dict(launch)
            packed: Packed | None = launch.pop("files", None)
            wind = launch.pop("wind", None)
            if packed:  # the driver's files, by content: here they are this launch's own
                self.files = NodeFiles(settings.data_dir)
                launch["param_files"], scripts = self.files.write(packed)
                if scripts:  # the allowlist is what the driver sent (checked against its own folder)
                    launch["scripts"] = scripts
                    settings = settings.model_copy(update={"scripts_dir": self.files.scripts_dir, "allow_paths": False})
            self._sessions = Sessions(settings=settings, server_id=f"ray-{os.getpid()}")
            s = self._sessions.open(**launch)
            if s.link is not None:
                recorder_for(s.link)  # from the start, as an MCP server's session: flight_picture draws it
            if wind and s.link is not None:
                record_open_wind(s.link, wind)  # the first entry of its wind history, as open_sitl's
        except OwnerError as e:  # the label is wrong, not the node's count
            out.set_exception(e)
            self._drop_files()
        except LeaseError as e:
            out.set_result({"refused": str(e), **self.ident})
            self._drop_files()
        except BaseException as e:  # the caller of open gets it, as if raised there
            if self.files is not None and isinstance(e, SitlpoolError) and len(e.args) == 1:
                e.args = (self.files.driver_names(str(e.args[0])),)  # the driver's file names in it
            self._drop_files()
            out.set_exception(e)
        else:
            self.sid, self._session = s.id, s
            self.watch = ClusterWatch(
                f"session {s.id} ({s.label}), instance {s.handle.instance} pid {s.handle.pid}", self._lost
            )
            out.set_result(self.info())

    def _drop_files(self) -> None:
        if self.files is not None:
            self.files.remove()

    def _lost(self) -> str:
        """The cluster is gone: stop the SITL and release its lease now."""
        self.close()
        return "stopped its SITL and released its lease"

    def info(self) -> dict:
        return self._here({**self.session.info(), "pid": self.session.handle.pid})

    def close(self) -> dict:
        if self.watch is not None:
            self.watch.stop()
        if self.sid is None:
            return {"closed": "nothing was open"}
        if self.session.closed:
            return {"closed": "already closed", **self.ident}
        if self.pacer is not None:
            self.pacer.remove(self.session.link)
        try:
            out = self._here(self.sessions.close(self.sid))
            try:  # made here, where its link's recorder saw the calls: the driver writes it (serve --ray)
                self._recipe = recipe_of(self.session, self.files.names if self.files is not None else None)
            except Exception:  # a recipe's failure never fails the close
                log.exception("the recipe of session %s", self.sid)
            return out
        finally:
            self._drop_files()

    _recipe: dict | None = None

    def recipe(self) -> dict | None:
        """The recipe of this closed session (``steps.session_recipes.recipe_of``), made at close."""
        return self._recipe

    # ---- pacing: the vehicle slowed while no tool call of the driver's server runs ------

    def pace(self, speedup: float) -> dict:
        """Pace the vehicle from now on: ``world.PACE_SPEEDUP`` between calls, ``speedup``
        during them (``pace_begin``/``pace_end`` around each call)."""
        link = self._link()
        if self.pacer is None:
            self.pacer = Pacer()
        self.pacer.add(link, speedup)
        return {"between_calls_speedup": self.pacer.paced, "during_calls_speedup": speedup}

    def pace_begin(self) -> bool:
        """A call begins: the vehicle back at its speedup (waited for, at most a few seconds)."""
        if self.pacer is not None:
            self.pacer.begin()
        return True

    def pace_end(self) -> None:
        if self.pacer is not None:
            self.pacer.end()

    def pace_speedup(self, speedup: float) -> None:
        """``set_speedup`` on a paced vehicle: its speedup during calls from now on."""
        if self.pacer is not None:
            self.pacer.set_speedup(self._link(), speedup)

    def status(self):
        """The handle's Status once the SITL ended, else None."""
        return self._session.handle.status if self._session else None

    # ---- its logs ---------------------------------------------------------------------

    def logs(self) -> list[dict]:
        """The records of the logs this session's SITL left, kept on this node once it ended,
        and its live log (``id`` "live") while it runs."""
        if self._session is None:
            return []
        h = self._session.handle
        out = [self._here(r.as_dict()) for r in getattr(h, "kept_logs", [])]
        live = h.current_log() if hasattr(h, "current_log") else None
        if live is not None:
            try:
                size = live.stat().st_size
            except OSError:  # it ended meanwhile: its log was kept (or is being)
                return out
            s = self._session
            out.append(
                self._here(
                    {
                        "id": logfetch.LIVE,
                        "live": True,
                        "kind": "bin",
                        "name": live.name,
                        "path": str(live),
                        "size": size,
                        "session": s.id,
                        "label": s.label,
                        "instance": h.instance,
                    }
                )
            )
        return out

    def read_log(self, log_id: str, offset: int, size: int) -> bytes:
        """A chunk of this session's live log (``log_id`` "live") or of a log this node keeps."""
        if log_id == logfetch.LIVE:
            live = self.session.handle.current_log() if hasattr(self.session.handle, "current_log") else None
            if live is None:
                raise SitlpoolError(f"session {self.sid} writes no log now (ArduCopter opens one at arming)")
            return logfetch.read_chunk(live, offset, size)
        return logfetch.read_chunk(logfetch.kept_path(log_id, self.sessions.settings.data_dir), offset, size)

    # ---- flight: the MCP tools' meanings, through the node's Session ------------------

    def _here(self, snap: dict) -> dict:
        """A session document with this node in it and connection strings using its address."""
        snap.update(self.ident)
        if "connect" in snap and self.session.handle.ports is not None:
            snap["connect"] = connect_strings(self.ident["host"], self.session.handle.ports)
        config = snap.get("config")
        if self.files is not None and config:  # the files by the names they had on the driver
            snap["config"] = {**config, "param_files": [self.files.names.get(p, p) for p in config["param_files"]]}
        return snap

    def _live(self):
        return self.sessions.get(self.session.id)  # refused once closed; keeps it from idling out

    def snapshot(self) -> dict:
        return self._here(self._live().snapshot())

    def fly(self, action: str, kw: dict) -> dict:
        if action not in FLIGHT_ACTIONS:
            raise SitlpoolError(f"{action!r} is not a flight action; use one of {', '.join(FLIGHT_ACTIONS)}")
        out = getattr(self._live(), action)(**kw)
        self._here(out["snapshot"])
        return out

    def wait_until(self, condition: str, value, timeout_s: float) -> dict:
        out = self._live().wait_until(condition, value, timeout_s)
        self._here(out["snapshot"])
        return out

    # ---- the link, for code written against a local handle (the pytest plugin's Sitl) --

    def link_call(self, name: str, args: tuple, kw: dict):
        link = self._link()
        if name == "arm_when_ready":  # the retry loop is a flight rule, not the link's
            return Flight(link).arm_when_ready(*args, **kw)
        fn = getattr(link, name, None) if not name.startswith("_") else None
        if not callable(fn):
            raise SitlpoolError(f"{name} is not a method of the vehicle link; a remote SITL forwards the public ones")
        return fn(*args, **kw)

    def vehicle(self):
        return self._link().vehicle

    # ---- its world: wind, failures, sim time (``sitlpool.world`` on the link held here) --

    def world(self, name: str, args: tuple, kw: dict):
        """``sitlpool.world.<name>(link, *args, **kw)`` on this node's link (its listeners, the
        wind history and the failures injected live here); plain data back. ``set_speedup`` on
        a paced vehicle also sets the speedup it runs at during calls (``pace_speedup``)."""
        if name not in WORLD_CALLS:
            raise SitlpoolError(
                f"{name!r} is not a world function a remote SITL runs; use one of {', '.join(WORLD_CALLS)}"
            )
        link = self._link()
        out = getattr(world, name)(link, *args, **kw)
        if name == "set_speedup" and self.pacer is not None and self.pacer.paced_speedup(link) is not None:
            self.pace_speedup(out["speedup"])
            out["paced_between_calls"] = self.pacer.paced
        return out

    def link_function(self, module: str, name: str, args: tuple, kw: dict):
        """``module.name(link, *args, **kw)`` on this node's link, for a function of ``LINK_CALLS``
        (their exchanges listen on the link, which lives here); plain data back."""
        if name not in LINK_CALLS.get(module, ()):
            raise SitlpoolError(f"{module}.{name} is not a link function a remote SITL runs")
        return getattr(importlib.import_module(module), name)(self._link(), *args, **kw)

    def _link(self):
        s = self._live()
        if s.link is None:
            raise SitlpoolError(f"session {self.sid} has no vehicle link ({s.state}); open a new one")
        return s.link


class Slot:
    """Holds one ``sitl`` slot of a node whose lease refused (Ray's count was one too many),
    so that placement goes elsewhere while it lives."""

    def ready(self) -> bool:
        return True


def _error(ident: dict, t0: float, e: BaseException, **more: Any) -> dict:
    return {
        "kind": "error",
        "type": type(e).__name__,
        "message": str(e),
        "traceback": "",
        "texts": [],
        "stderr_tail": "",
        "instance": None,
        "seconds": time.monotonic() - t0,
        **ident,
        **more,
    }


def run_item(fn, item, index: int, opts: dict, tally=None) -> dict:
    """Run ``fn(sitl, item)`` on a SITL leased and launched on this node; the SITL is
    stopped and its lease released before the result goes back (or as soon as the
    cluster is lost)."""
    ident = node_identity()
    if tally is not None:
        tally.started.remote(index, ident["host"], ident["node_id"])
    t0 = time.monotonic()
    settings = load_settings()
    files = None
    launch: dict = {}
    if opts.get("files"):  # the driver's parameter files and scripts, by content
        files = NodeFiles(settings.data_dir)
        launch["param_files"], scripts = files.write(opts["files"])
        if scripts:
            launch["scripts"] = scripts
            settings = settings.model_copy(update={"scripts_dir": files.scripts_dir, "allow_paths": False})
    m = ManagedManager(settings)

    def lost() -> str:
        m.close_all()
        return "stopped its SITL and released its lease"

    watch = ClusterWatch(f"map item {index}", lost)
    h = None
    out: dict = {}
    try:
        try:
            h = m.start(
                f"item-{index}",
                owner=f"sitlpool fleet item {index} ({opts.get('label') or 'map'}) pid {os.getpid()}",
                model=opts.get("model", "quad"),
                speedup=opts.get("speedup"),
                params=opts.get("params"),
                home=opts.get("home"),
                tlog=bool(opts.get("keep_logs")),  # its flight's logs: the telemetry too
                wipe=opts.get("wipe", True),
                **launch,
            )
        except LeaseError as e:
            if isinstance(e, OwnerError):  # the label is wrong, not the node's count: this item's failure
                raise
            return {"kind": "refused", "message": str(e), **ident}
        try:
            result = fn(Sitl(h), item)
            out = {"kind": "ok", "result": result, "instance": h.instance, "seconds": time.monotonic() - t0, **ident}
        except Exception as e:  # the item's failure, not the batch's
            texts: list[str] = [t for _, _, t in list(h.link.vehicle.texts)[-10:]] if h.link is not None else []
            out = _error(
                ident,
                t0,
                e,
                traceback=traceback.format_exc(),
                texts=texts,
                stderr_tail=stderr_tail(h.cwd / "stderr", 15) if h.cwd else "",
                instance=h.instance,
            )
    except SitlpoolError as e:  # the SITL did not start: that is this item's failure too
        out = _error(ident, t0, e)
    finally:
        watch.stop()
        m.close_all()  # waits for the SITL's end: its logs are kept by then
        if files is not None:
            files.remove()
    if opts.get("keep_logs") and h is not None:
        out["logs"] = [r.as_dict() for r in getattr(h, "kept_logs", [])]
    return out


class Tally:
    """Where each running item is, for the progress display (only made when it is shown)."""

    def __init__(self) -> None:
        self.running: dict[int, tuple[str, str]] = {}

    def started(self, index: int, host: str, node_id: str) -> None:
        self.running[index] = (host, node_id)

    def where(self) -> dict[int, tuple[str, str]]:
        return dict(self.running)


def node_settings() -> tuple[str, dict]:
    """This node's id and its ``settings_values`` (the pydantic-settings model, read here)."""
    return ray.get_runtime_context().get_node_id(), settings_values(load_settings())


def node_status(all_: bool = False) -> dict:
    """This node's local status document (``sitlpool status --json``) and its identity."""
    return {**node_identity(), **pool_status(all_=all_)}
