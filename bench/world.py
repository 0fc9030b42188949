"""How soon a world change reaches the vehicle (issue 22's target: set_wind / inject_failure take
effect on the vehicle <= 100 ms after the call returns). Each call returns once the vehicle has
echoed every parameter it set (PARAM_VALUE): the change is in its simulation from then on. Printed:
the call's own wall time, and from its return to the first telemetry that shows it: GPS_RAW_INT
without a fix (gps_loss), SYS_STATUS's voltage at the injected level (battery_low), a vehicle holding
at 10 m in GUIDED leaning 0.5 degrees more (set_wind 10 m/s; the lean then grows over seconds as the
drag builds), so that figure includes the telemetry stream's own period (4-10 Hz). On the built-in
vehicle, and on real ArduCopter when SITLPOOL_SITL_BINARY names one (or ``--real PATH``).
``--rounds N``: repetitions of each (default 5)."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _util import report, stats  # noqa: E402

POOL = "236-239"  # below 256 (ArduPilot keeps -I in 8 bits), away from the default 40-59


def _arg(name: str, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


class Seen:
    """The first message after ``start()`` for which ``pred(msg)`` holds: its wall time."""

    def __init__(self, link, pred):
        self.link, self.pred, self.t0, self.at = link, pred, None, None
        self.ev = threading.Event()
        link.add_listener(self)

    def start(self) -> None:
        self.t0, self.at = time.monotonic(), None
        self.ev.clear()

    def __call__(self, msg) -> None:
        if self.t0 is not None and self.at is None and self.pred(msg):
            self.at = time.monotonic()
            self.ev.set()

    def wait(self, timeout: float = 10.0) -> float | None:
        ok = self.ev.wait(timeout)
        self.link.remove_listener(self)
        return self.at - self.t0 if ok and self.at is not None else None


class Roll:
    """The vehicle's latest roll (degrees), from ATTITUDE."""

    def __init__(self, link):
        self.value = 0.0
        link.add_listener(self)

    def __call__(self, msg) -> None:
        if msg.get_type() == "ATTITUDE":
            self.value = msg.roll


def leaning(base_deg: float):
    return lambda m: m.get_type() == "ATTITUDE" and abs(math.degrees(m.roll)) > base_deg + 0.5


def measure(name: str, binary: str | None, rounds: int) -> None:
    from sitlpool import world
    from sitlpool.config import load_settings
    from sitlpool.flight import Flight
    from sitlpool.sessions import Sessions

    with tempfile.TemporaryDirectory(prefix="bench-world-") as d:
        overrides = {"pool": POOL, "data_dir": d, **({"sitl_binary": binary} if binary else {})}
        sessions = Sessions(load_settings(**overrides))
        try:
            s = sessions.open(speedup=1, label="bench-world")
            link = s.link
            f = Flight(link)
            f.arm_and_takeoff(10, timeout=120)
            link.wait(lambda v: (v.rel_alt or 0) > 9.5, 60)
            time.sleep(3)  # settled in the hover
            roll = Roll(link)
            calls: dict[str, list[float]] = {"gps_loss": [], "battery_low": [], "set_wind": []}
            seen: dict[str, list[float]] = {k: [] for k in calls}
            for _ in range(rounds):
                # GPS lost: the fix goes
                w = Seen(link, lambda m: m.get_type() == "GPS_RAW_INT" and m.fix_type < 3)
                t = time.monotonic()
                world.inject_failure(link, "gps_loss")
                calls["gps_loss"].append(time.monotonic() - t)
                w.start()
                if (x := w.wait()) is not None:
                    seen["gps_loss"].append(x)
                world.clear_failure(link, "gps_loss")
                link.wait(lambda v: (v.gps_fix or 0) >= 3, 30)
                # battery low: the voltage drops to the injected level
                w = Seen(link, lambda m: m.get_type() == "SYS_STATUS" and 0 < m.voltage_battery < 10600)
                t = time.monotonic()
                world.inject_failure(link, "battery_low", voltage=10.4)
                calls["battery_low"].append(time.monotonic() - t)
                w.start()
                if (x := w.wait()) is not None:
                    seen["battery_low"].append(x)
                world.clear_failure(link, "battery_low")
                time.sleep(1)
                # wind: the lean into it starts
                w = Seen(link, leaning(abs(math.degrees(roll.value))))
                t = time.monotonic()
                world.set_wind(link, 10, 90, profile="uniform")
                calls["set_wind"].append(time.monotonic() - t)
                w.start()
                if (x := w.wait()) is not None:
                    seen["set_wind"].append(x)
                world.set_wind(link, 0, 0)
                time.sleep(4)  # back to a still hover
            for k in calls:
                report(f"{name}: {k} call (returns once the vehicle echoed it)", stats(calls[k]))
                report(
                    f"{name}: {k} return -> first telemetry showing it",
                    stats(seen[k]) if seen[k] else "never seen",
                    "<= 100 ms",
                )
        finally:
            sessions.close_all()


def main() -> None:
    rounds = _arg("--rounds", 5)
    measure("built-in vehicle", None, rounds)
    real = _arg("--real", os.environ.get("SITLPOOL_SITL_BINARY", ""))
    if real:
        measure("real ArduCopter", real, rounds)
    else:
        print("(no real ArduCopter: set SITLPOOL_SITL_BINARY or --real PATH for its figures)")


if __name__ == "__main__":
    main()
