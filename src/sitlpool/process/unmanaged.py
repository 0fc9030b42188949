"""SITLs someone else started: found through a name service, attached on a serial port
nobody uses, watched by a monitor thread, and never killed.

After Syskit's ``UnmanagedProcess``: ``spawn`` starts nothing; ``wait_running``
resolves the vehicle (warning at most every 5 s while it is not there); a monitor
thread then pings it and its end means death; ``kill`` only stops watching.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import procinfo
from ..config import load_settings
from ..errors import ConfigError, InstanceError, NotRunning, ResolveError
from ..instances import MAX_INSTANCE, SERIAL0_BASE, SERIAL_NAMES, Ports, out_of_range, ports
from ..leases import LeasePool
from ..mavlink.endpoints import parse_endpoint
from ..ports import TCP_ESTABLISHED, TCP_LISTEN, bound, busy_ports, clients, name_holders, read_sockets
from .base import ProcessManager, SitlProcess, Status
from .binaries import is_sitl_process
from .managed import ManagedManager

log = logging.getLogger("sitlpool.unmanaged")
WARN_EVERY_S = 5.0
SILENT_CONNECTION_S = 2.5  # connected but no HEARTBEAT: another client is being served there


@dataclass
class Resolved:
    """What the name service found for an instance or endpoint."""

    endpoint: str
    pid: int | None = None
    start_ticks: int | None = None
    executable: str | None = None

    @classmethod
    def of(cls, endpoint: str, pid: int | None) -> Resolved:
        """The endpoint and, when its local process is known, that process's start time and executable."""
        if pid is None:
            return cls(endpoint)
        return cls(endpoint, pid, procinfo.start_ticks(pid), procinfo.exe(pid))


def _instance_of_port(port: int) -> int | None:
    """The instance whose serial port (SERIAL0/1/2) ``port`` is, or None."""
    off = port - SERIAL0_BASE
    if off >= 0 and off % 10 in (0, 2, 3) and off // 10 <= MAX_INSTANCE:
        return off // 10
    return None


def _local_address(family: int, sockaddr) -> bool:
    """Does this resolved address reach this machine? Loopback (all of 127.0.0.0/8, ::1),
    unspecified (0.0.0.0 and :: connect to this host), their IPv4-mapped forms, and any
    address the kernel lets us bind: exactly the addresses of this host's interfaces."""
    try:
        ip = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    if mapped is not None:
        ip, family, sockaddr = mapped, socket.AF_INET, (str(mapped), 0)
    if ip.is_loopback or ip.is_unspecified:
        return True
    bind_to = (sockaddr[0], 0) if family == socket.AF_INET else (sockaddr[0], 0, *sockaddr[2:4])
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind(bind_to)
        return True
    except OSError:
        return False


def is_this_host(host: str) -> bool:
    """Does ``host`` (a name or an address, in any spelling: ``127.0.0.2``, ``0.0.0.0``,
    ``LOCALHOST``, ``127.1``, ``::ffff:127.0.0.1``, this machine's own name or addresses)
    reach this machine? Decided on what it resolves to, never on how it is spelt; a name
    with any local address counts as local (a connection may go there)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return False
    return any(_local_address(family, sockaddr) for family, _, _, _, sockaddr in infos)


def local_instance_of(endpoint: str) -> int | None:
    """The instance of this machine that ``endpoint`` reaches, or None: its host resolves to
    this machine (``is_this_host``) and its port is an instance's serial port. Raises
    ConfigError for a malformed endpoint."""
    _, host, port = parse_endpoint(endpoint)
    return _instance_of_port(port) if is_this_host(host) else None


class NameService:
    """Resolves an instance to a free serial endpoint and the process behind it (cached)."""

    def __init__(self):
        self.cache: dict[int, tuple[int, int]] = {}  # instance -> (pid, start ticks)

    def process_on(self, p: Ports) -> tuple[int | None, str]:
        busy = [b for b in busy_ports(p) if b.proto == "tcp"]
        if not any(b.port == p.serial0 for b in busy):
            return None, f"nothing listens on instance {p.instance}'s SERIAL0 port {p.serial0} yet"
        cached = self.cache.get(p.instance)
        if cached and procinfo.is_alive(*cached):
            return cached[0], ""
        name_holders(busy)
        holder = next((b.holder for b in busy if b.port == p.serial0), None)
        if holder is None or holder.pid is None:
            return None, ""
        self.cache[p.instance] = (holder.pid, procinfo.start_ticks(holder.pid) or 0)
        return holder.pid, ""

    def resolve_instance(self, n: int, serial: str | None) -> tuple[Resolved | None, str]:
        p = ports(n)
        pid, why = self.process_on(p)
        if why:
            return None, why
        socks = read_sockets(("tcp",), tcp_states=(1 << TCP_LISTEN) | (1 << TCP_ESTABLISHED))
        listening = {s.local_port for s in socks if s.state == TCP_LISTEN}
        candidates = (
            [serial] if serial else ["serial1", "serial2"]
        )  # never SERIAL0 unless asked: its client is the owner's
        serial0 = f"tcp:127.0.0.1:{p.serial0}"
        if not serial and not (listening & {p.serial1, p.serial2}) and not clients(p.serial0, socks):
            return None, (
                f"instance {n}'s SITL is still waiting for its first client on SERIAL0 ({serial0}); it opens "
                "SERIAL1/2 only once that client connects. Wait for its owner to connect, or, if the SITL is "
                f"yours, attach to {serial0} itself"
            )
        taken = []
        for name in candidates:
            port = p.serial(name)
            if port not in listening:
                taken.append(f"{name} (tcp:{port}) is not listening")
                continue
            cl = clients(port, socks)
            if not cl:
                return Resolved.of(f"tcp:127.0.0.1:{port}", pid), ""
            who = ", ".join(c.describe() for c in cl)
            taken.append(f"{name} (tcp:{port}) is used by {who}")
        return None, (
            f"instance {n} has no free serial port to attach to (SITL serves one client per port): "
            + "; ".join(taken)
            + (f". Attach to SERIAL0 ({serial0}) only if that SITL is yours" if not serial else "")
        )

    def resolve_endpoint(self, endpoint: str) -> tuple[Resolved | None, str]:
        proto, host, port = parse_endpoint(endpoint)
        pid = None
        if proto == "tcp" and is_this_host(host):
            socks = read_sockets(("tcp",), tcp_states=(1 << TCP_LISTEN) | (1 << TCP_ESTABLISHED))
            if not any(s.local_port == port and s.state == TCP_LISTEN for s in socks):
                return None, f"nothing listens on {endpoint} yet"
            cl = clients(port, socks)
            if cl:
                who = ", ".join(c.describe() for c in cl)
                return (
                    None,
                    f"{endpoint} already serves a client ({who}); SITL serves one client per port: pick another",
                )
            owners = name_holders(bound({("tcp", port)}))
            holder = owners[0].holder if owners else None
            pid = holder.pid if holder else None
        return Resolved.of(f"{proto}:{host}:{port}", pid), ""


class UnmanagedSitl(SitlProcess):
    """A SITL someone else runs, attached read-only (unless ``control``) and watched."""

    def __init__(
        self,
        process_manager,
        name: str,
        *,
        instance: int | None = None,
        endpoint: str | None = None,
        host_id: str | None = None,
        control: bool = False,
        serial: str | None = None,
        period: float = 0.1,
        lost_after: float = 2.5,
        name_service: NameService | None = None,
    ):
        if (instance is None) == (endpoint is None):
            raise ConfigError("attach needs exactly one of an instance number or an endpoint tcp:HOST:PORT")
        if instance is not None:
            why = (
                "is not a whole number"
                if isinstance(instance, bool) or not isinstance(instance, int)
                else out_of_range(instance)
            )
            if why:
                raise InstanceError(
                    f"instance {instance} {why.removeprefix(f'instance {instance} ')}; attach to an "
                    f"instance from 0 to {MAX_INSTANCE}"
                )
        if serial is not None and serial not in SERIAL_NAMES:
            raise ConfigError(f"serial port {serial!r}: use one of {', '.join(SERIAL_NAMES)}")
        if endpoint is not None:
            _, host, port = parse_endpoint(endpoint)
            local = is_this_host(host)  # what the host reaches, not how it is spelt
            instance_guess = _instance_of_port(port) if local else None
            where = "localhost" if local else endpoint
        else:
            where, instance_guess = "localhost", instance
        super().__init__(process_manager, name, host_id or where)
        self._instance = instance_guess
        self.requested_endpoint = endpoint
        self.control = control
        self.serial = serial
        self.period = period
        self.lost_after = lost_after
        self.name_service = name_service or NameService()
        self.resolved: Resolved | None = None
        self.monitor_thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None
        self._last_warning = 0.0
        self._spawned = False
        self._last_reason = "not resolved yet"
        self._link_started = 0.0

    @property
    def instance(self) -> int | None:
        return self._instance

    @property
    def ports(self) -> Ports | None:
        return None if self._instance is None else ports(self._instance)

    @property
    def pid(self) -> int | None:
        return self.resolved.pid if self.resolved else None

    @property
    def kept_logs(self) -> list:
        """Always empty: an unmanaged SITL's logs are its owner's, never moved into the store."""
        return []

    def current_log(self) -> Path | None:
        """The DataFlash log it writes now (its cwd's ``logs/``, when it runs on this machine
        and we may look), or None. Read in place, never moved."""
        pid = self.pid
        if pid is None or self.dead or not self.on_localhost:
            return None
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            return None
        from ..logs.sitldir import current_log  # sitlpool.logs loads DFReader (~0.4 s): only when asked

        return current_log(cwd / "logs")

    def _describe_target(self) -> str:
        return f"instance {self._instance}" if self.requested_endpoint is None else self.requested_endpoint

    def spawn(self) -> None:
        """Starts nothing: resets resolution (the SITL is someone else's to start)."""
        self._spawned = True
        self._last_warning = time.monotonic()

    def _try_resolve(self) -> bool:
        """One attempt: find the vehicle and connect; True once a HEARTBEAT arrived."""
        if self.link is not None:
            if self.link.vehicle.first_heartbeat is not None:
                return True
            silent = time.monotonic() - self._link_started > SILENT_CONNECTION_S
            if self.link.state in ("closed", "stopped") or silent:
                self._last_reason = (
                    f"{self.link.endpoint} accepted the connection but sent no HEARTBEAT in "
                    f"{SILENT_CONNECTION_S:g}s (another client is being served there?)"
                    if silent
                    else f"{self.link.endpoint}: {self.link.error}"
                )
                self.link.close()
                self.link = None
            return False
        ns = self.name_service
        if self.requested_endpoint is not None:
            res, why = ns.resolve_endpoint(self.requested_endpoint)
        else:
            assert self._instance is not None  # a handle made for an instance always knows it
            res, why = ns.resolve_instance(self._instance, self.serial)
        if res is None:
            self._last_reason = why
            return False
        self.resolved = res
        self._link_started = time.monotonic()
        # pymavlink costs ~35 ms to import: only when a link is made, never for `sitlpool status`
        # (which imports this module for discover)
        from ..mavlink.link import VehicleLink

        self.link = VehicleLink(
            res.endpoint,
            read_only=not self.control,
            name=f"{self.name} ({self._describe_target()})",
            lost_after=self.lost_after,
            connect_timeout=2.0,
        ).start()
        return False

    def wait_running(self, timeout: float | None = None) -> bool:
        if not self._spawned:
            raise NotRunning(f"{self.name}: call spawn() before wait_running()")
        if self.dead:
            return False
        if self.monitor_thread is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._quitting.is_set():
            if self._try_resolve():
                self.monitor_thread = threading.Thread(
                    target=self._monitor_main, name=f"monitor {self.name}", daemon=True
                )
                self.monitor_thread.start()
                return True
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY_S:
                log.warning("waiting for unmanaged SITL %s: %s", self._describe_target(), self._last_reason)
                self._last_warning = now
            if deadline is not None and now >= deadline:
                return False
            time.sleep(0.05 if self.link is not None else 0.1)
        return False

    # ---- the monitor thread -------------------------------------------------------

    def _monitor_main(self) -> None:
        try:
            reason = self._monitor(self.period)
        except BaseException as e:
            self._thread_error = e
            self._finish(Status.lost(f"monitor thread failed: {e!r}"))
            return
        self._finish(Status.detached() if reason is None else Status.lost(reason))

    def _monitor(self, period: float = 0.1) -> str | None:
        """Watch until the vehicle is gone (returns why) or ``kill`` was called (returns None)."""
        pidfd = None
        pid = self.pid
        ticks = self.resolved.start_ticks if self.resolved else None
        if pid is not None and self.on_localhost:
            try:
                pidfd = os.pidfd_open(pid)
                if ticks is not None and procinfo.start_ticks(pid) != ticks:
                    os.close(pidfd)
                    return f"process {pid} is gone (its pid now names another process)"
            except (OSError, AttributeError):
                pidfd = None
        poller = None
        if pidfd is not None:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
        try:
            while not self._quitting.is_set():
                if poller is not None:
                    if poller.poll(period * 1000):  # readable = the process exited: seen at once
                        exe = self.resolved.executable if self.resolved else None
                        return f"the SITL process {pid} ({exe or '?'}) exited"
                elif self._quitting.wait(period):
                    break
                if self._quitting.is_set():
                    break
                link = self.link
                if link is None or link.state == "stopped":
                    continue
                if link.state == "closed":
                    return f"the vehicle closed the connection ({link.error})"
                age = link.vehicle.heartbeat_age()
                if age is not None and age > self.lost_after:
                    return f"no HEARTBEAT for {age:.1f}s from {link.endpoint}"
            return None
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def kill(self, wait: bool = False) -> None:
        """Stop watching and detach. Never sends a signal: the SITL keeps running."""
        self._quitting.set()
        if self.link is not None:
            self.link.close()
        if self.monitor_thread is None:
            self._finish(Status.detached())
        elif wait and threading.current_thread() is not self.monitor_thread:
            self.monitor_thread.join()

    def verify_threads_state(self) -> None:
        if self._thread_error is not None:
            raise self._thread_error

    def _endpoint(self, name: str) -> str:
        if self._instance is None:
            raise ResolveError(
                f"{self.name}: the instance behind {self.requested_endpoint} is unknown; "
                f"only {self.requested_endpoint} itself can be used"
            )
        if self.on_localhost:
            host = "127.0.0.1"
        else:
            assert self.requested_endpoint is not None  # only an endpoint's handle is elsewhere
            host = parse_endpoint(self.requested_endpoint)[1]
        return f"tcp:{host}:{ports(self._instance).serial(name)}"


def attach(manager: ProcessManager, name: str, *, timeout: float = 10.0, **kw) -> UnmanagedSitl:
    """Create, spawn and resolve an UnmanagedSitl under ``manager``; ResolveError if not found in time."""
    h = UnmanagedSitl(manager, name, **kw)
    manager._add(h)
    h.spawn()
    if not h.wait_running(timeout):
        h.kill()
        manager.forget(h)
        raise ResolveError(f"cannot attach to {h._describe_target()} within {timeout:g}s: {h._last_reason}")
    return h


class SitlManager(ManagedManager):
    """Both kinds under one manager: ``start`` launches, ``attach`` attaches; one
    ``wait_termination`` reports managed and unmanaged deaths alike."""

    def attach(self, name: str, **kw) -> UnmanagedSitl:
        return attach(self, name, **kw)


class UnmanagedManager(ProcessManager):
    """Attaches to SITLs someone else started: ``start(name, instance=N | endpoint=...)``."""

    def start(
        self,
        name: str,
        *,
        instance: int | None = None,
        endpoint: str | None = None,
        host_id: str | None = None,
        timeout: float = 10.0,
        **kw,
    ) -> UnmanagedSitl:
        return attach(self, name, instance=instance, endpoint=endpoint, host_id=host_id, timeout=timeout, **kw)


# ---- discovery ------------------------------------------------------------------------


@dataclass
class DiscoveredSitl:
    instance: int
    pid: int | None
    executable: str | None
    cmdline: list[str]
    clients: dict[str, list[str]] = field(default_factory=dict)
    free_to_attach: str | None = None
    ports: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "instance": self.instance,
            "pid": self.pid,
            "executable": self.executable,
            "cmdline": self.cmdline,
            "clients": self.clients,
            "free_to_attach": self.free_to_attach,
            "ports": self.ports,
        }


def discover(settings=None, pool: LeasePool | None = None) -> list[DiscoveredSitl]:
    """SITLs running on this machine without a lease, on any instance (0 included)."""
    s = settings or load_settings()
    pool = pool or LeasePool.from_settings(s, check=False)
    held = {h.instance for h in pool.status()}
    socks = read_sockets(("tcp",), tcp_states=(1 << TCP_LISTEN) | (1 << TCP_ESTABLISHED))
    listening = {x.local_port: x for x in socks if x.state == TCP_LISTEN}
    out: list[DiscoveredSitl] = []
    for port in sorted(listening):
        n = _instance_of_port(port)
        if n is None or port != ports(n).serial0 or n in held:
            continue
        p = ports(n)
        busy = name_holders(bound({("tcp", p.serial0)}, socks))
        holder = busy[0].holder if busy else None
        pid = holder.pid if holder else None
        if pid is None or not is_sitl_process(pid):
            continue
        d = DiscoveredSitl(n, pid, procinfo.exe(pid), procinfo.cmdline(pid))
        for name in SERIAL_NAMES:
            sp = p.serial(name)
            if sp not in listening:
                continue
            d.ports.append(f"{name}=tcp:{sp}")
            d.clients[name] = [c.describe() for c in clients(sp, socks)]
            if name != "serial0" and not d.clients[name] and d.free_to_attach is None:
                d.free_to_attach = name
        out.append(d)
    return out
