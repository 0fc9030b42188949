"""``sitlpool demo``: a newcomer's first flight. Lease an instance, launch a SITL (the
built-in vehicle, or the configured ArduPilot binary), fly a short hop through the flight
rules (``sitlpool.flight``), land and clean up, also on Ctrl-C."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .config import format_pool, load_settings
from .errors import SitlpoolError
from .flight import Flight
from .process import ManagedManager


def demo(
    binary: str | None = None, speedup: float = 5.0, hold_s: float = 5.0, say=print, altitude_m: float = 10.0
) -> None:
    """``sitlpool demo``: lease, launch, fly a short hop, clean up (also on Ctrl-C)."""
    overrides = {"sitl_binary": binary} if binary else {}
    settings = load_settings(**overrides)
    model = "plane" if settings.sitl_binary is not None and Path(settings.sitl_binary).name == "arduplane" else "quad"
    m = ManagedManager(settings)
    h = None
    try:
        say(
            f"leasing an instance from pool {format_pool(settings.pool)} and launching "
            f"{settings.sitl_binary or 'the built-in vehicle'} (speedup {speedup:g})"
        )
        h = m.start("demo", model=model, speedup=speedup, owner=f"sitlpool demo (pid {os.getpid()})")
        link = h.link
        f = Flight(link, say=say)
        say(f"instance {h.instance}: SITL pid {h.pid} ready, MAVLink on {h.endpoint('serial0')}")
        say("waiting until it is ready to arm (GPS, EKF, pre-arm checks)...")
        f.arm_and_takeoff(altitude_m, timeout=90, on_refused=lambda e: say(f"not armable yet ({e}); retrying"))
        say(f"armed; taking off to {altitude_m:g} m")
        target, last = Flight.reached(altitude_m), -1.0
        deadline = time.monotonic() + 120
        while not link.wait(lambda v: (v.rel_alt or 0) >= target, 1.0):
            alt = link.vehicle.rel_alt or 0
            if alt - last >= 1:
                say(f"climbing: {alt:.1f} m")
                last = alt
            if h.dead:
                raise SitlpoolError(f"the SITL died in flight: {h.status.reason if h.status else 'it ended'}")
            if time.monotonic() > deadline:
                raise SitlpoolError(f"the vehicle never climbed to {altitude_m:g} m (at {alt:.1f} m after 120 s)")
        say(f"at {link.vehicle.rel_alt:.1f} m; holding for {hold_s:g} s")
        if f.kind == "plane":
            f.set_mode("LOITER")
        time.sleep(hold_s / max(1.0, speedup))
        if f.kind == "plane":
            say("a plane does not land on command: done circling")
            return
        say("landing")
        f.land()
        if not link.wait(lambda v: not v.armed, 120):
            raise SitlpoolError("the vehicle did not land and disarm within 120 s")
        say(f"landed and disarmed at {link.vehicle.rel_alt:.1f} m")
    except KeyboardInterrupt:
        say("interrupted: cleaning up")
        raise
    finally:
        if h is not None and not h.dead:
            h.kill(wait=True)
        m.close_all()
        if h is not None:
            say(f"SITL stopped, instance {h.instance} released")
