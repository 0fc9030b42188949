"""``sitlpool watch INSTANCE --out udp:HOST:PORT [--out tcpin:HOST:PORT ...] [--control]``: ground
stations watch a vehicle through sitlpool's own link.

It attaches as ``sitlpool attach`` does (one link, on a serial port nobody uses) and forwards
the vehicle's MAVLink to every output (``sitlpool.mavlink.forward``): any number of ground
stations share that one link. Read-only unless ``--control``, which the lease's holder alone
may ask for (the rule of ``attach``; ``--force`` overrides it, logged).
``add_parser(subparsers)`` registers the command.
"""

from __future__ import annotations

import argparse
import logging
import time

from ..errors import ConfigError
from ..process import UnmanagedManager
from ._common import EXIT_DIED, EXIT_OK, _typed, err, held_by_another, say, target_arg, timeout_arg

log = logging.getLogger("sitlpool.watch")
STATUS_EVERY_S = 5.0


@_typed
def output_arg(text: str) -> str:
    """An output's form (``udp:HOST:PORT`` / ``tcpin:HOST:PORT``); whether it may leave this
    machine is decided with ``--allow-remote``, in the command."""
    from ..mavlink.forward import parse_output  # pymavlink: only `watch` loads it, not every command

    parse_output(text, allow_remote=True)
    return text


def add_parser(sub) -> argparse.ArgumentParser:
    w = sub.add_parser(
        "watch",
        help="ground stations watch a vehicle through sitlpool's link (read-only)",
        description="Attaches to the vehicle as 'sitlpool attach' does and forwards its MAVLink to each "
        "--out: udp:HOST:PORT is sent to a ground station listening there (QGroundControl and Mission "
        "Planner listen on udp:127.0.0.1:14550; MAVProxy: --master=udp:127.0.0.1:PORT), tcpin:HOST:PORT "
        "listens for ground stations. No serial port is taken per watcher and the agent's link is never "
        "touched. Read-only: a watcher's commands are dropped and it is told why in a STATUSTEXT; its "
        "parameter and mission requests are answered. Outputs are loopback only unless --allow-remote.",
    )
    w.add_argument("target", type=target_arg, help="instance number or tcp:HOST:PORT")
    w.add_argument(
        "--out",
        dest="outputs",
        action="append",
        type=output_arg,
        required=True,
        metavar="udp:HOST:PORT|tcpin:HOST:PORT",
        help="where ground stations watch (repeatable)",
    )
    w.add_argument(
        "--control",
        action="store_true",
        help="let the watchers' commands through (only for the instance's lease holder)",
    )
    w.add_argument("--force", action="store_true", help="--control even though someone else holds the instance")
    w.add_argument("--allow-remote", action="store_true", help="outputs may be on another machine")
    w.add_argument("--timeout", type=timeout_arg, default=10, metavar="SECONDS", help="to find the vehicle")
    w.set_defaults(fn=cmd_watch)
    return w


def check_control(instance: int | None, endpoint: str | None, force: bool) -> None:
    """The rule of ``attach(control=True)``: refused on an instance someone else leases,
    naming the holder, unless ``force`` (logged). The holder is this process or one of its parents."""
    other = held_by_another(instance, endpoint)
    if other is None:
        return
    n, h = other
    if not force:
        raise ConfigError(
            f"instance {n} is leased to {h.describe()}: --control would let the watchers fly its vehicle; "
            "watch read-only (without --control), ask its holder, or pass --force if you must take control"
        )
    log.warning("control of instance %d forced while %s holds it", n, h.describe())
    err(f"warning: --control forced while {h.describe()} holds instance {n}")


def cmd_watch(a: argparse.Namespace) -> int:
    from ..mavlink.forward import Forwarder, parse_output  # pymavlink: only `watch` loads it

    for o in a.outputs:  # loopback only unless allowed: checked before anything is attached
        parse_output(o, a.allow_remote)
    target = dict(a.target)
    text = target.pop("text")
    if a.control:
        check_control(target.get("instance"), target.get("endpoint"), a.force)
    h = UnmanagedManager().start("watch", timeout=a.timeout, control=a.control, **target)
    fw = None
    try:
        assert h.link is not None  # attached: the link is up
        fw = Forwarder(h.link, a.outputs, control=a.control, allow_remote=a.allow_remote)
        mode = "control: the watchers' commands reach the vehicle" if a.control else "read-only"
        say(
            f"watching {text} (pid {h.pid or '?'}) on {h.link.endpoint} for {', '.join(a.outputs)}; "
            f"{mode}; Ctrl-C to stop"
        )
        last = time.monotonic()
        while not h.join(1.0):
            if time.monotonic() - last >= STATUS_EVERY_S:
                last = time.monotonic()
                i = fw.info()
                v = h.link.vehicle
                say(
                    f"{time.strftime('%H:%M:%S')}  mode {v.mode}  {'ARMED' if v.armed else 'disarmed'}  "
                    f"watchers {len(i['watchers'])}  forwarded {i['forwarded']}  refused {i['refused']}"
                    + (f"  dropped {i['dropped']}" if i["dropped"] else "")
                )
    except KeyboardInterrupt:
        say("stopped watching; the SITL was left running")
        return EXIT_OK
    finally:
        if fw is not None:
            fw.close()
        h.kill(wait=True)
    status = h.status
    err(f"the watched SITL died: {status.reason if status else 'it exited'}")
    return EXIT_DIED
