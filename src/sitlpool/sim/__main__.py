"""``python -m sitlpool.sim`` / ``sitlpool-sim``: the built-in vehicle, with SITL's flags."""

from __future__ import annotations

import argparse
import ctypes
import signal
import sys
from pathlib import Path

MODELS = {"quad", "copter", "+", "x", "hexa", "quadplus", "quadx"}
DEFAULT_HOME = "-35.3632621,149.1652374,584,353"  # real SITL's default: ArduPilot's CMAC field


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # SITL exits 1 on a bad command line, not argparse's 2
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(1)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sitlpool-sim", description="sitlpool's built-in simulated copter (an ArduPilot SITL stand-in)")
    p.add_argument("-I", "--instance", type=int, default=0, help="instance number: ports 5760+10n etc.")
    p.add_argument("--model", "-M", help="vehicle model: quad, copter, +, x, hexa")
    p.add_argument("--home", "-O", default=DEFAULT_HOME, help="lat,lon,alt,heading")
    p.add_argument("--speedup", "-s", type=float, default=1.0)
    p.add_argument("--defaults", default="", help="comma-separated parameter files")
    p.add_argument("-w", "--wipe", action="store_true", help="wipe eeprom.bin (parameters) at start")
    p.add_argument("--base-port", "-B", type=int, default=5760)
    p.add_argument("--rc-in-port", type=int)
    p.add_argument("--sim-port-in", type=int)
    p.add_argument("--sim-port-out", type=int)
    p.add_argument("--sysid", type=int)
    for k in range(8):
        p.add_argument(
            f"--serial{k}", help="serial0: tcp:0 boots without waiting for a client" if k == 0 else argparse.SUPPRESS
        )
    p.add_argument(
        "--ready-delay",
        type=float,
        default=41.5,
        help="sim seconds until the EKF uses GPS (41.5 as on real SITL); the whole boot "
        "timeline (GPS detected, pre-arm checks passing) scales with it",
    )
    p.add_argument(
        "--wind-seed",
        type=int,
        default=0,
        help="seed of the wind's turbulence (SIM_WIND_TURB), re-applied at each SIM_WIND_* change "
        "(a sitlpool extra: real SITL's turbulence cannot be seeded)",
    )
    return p


def _join_values(argv: list[str]) -> list[str]:
    """``--home -35.3,149.1,584,353``: a value starting with '-' is still the option's value,
    as SITL (getopt) takes it; argparse would read it as an option."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in ("--home", "-O", "--ready-delay") and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{a}={argv[i + 1]}" if a.startswith("--") else a + argv[i + 1])
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _set_process_name(name: bytes) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME: how ps and sitlpool tell a SITL
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # SITL never handles SIGINT
    _set_process_name(b"sitlpool-sim")
    a = parser().parse_args(_join_values(argv))
    if not a.model:
        print("You must specify a vehicle model.", flush=True)
        sys.exit(1)
    if a.model.lower() not in MODELS:
        print(
            f"Unknown vehicle model '{a.model}': the built-in vehicle flies quad, copter, +, x or hexa; "
            "set SITLPOOL_SITL_BINARY to a real ArduPilot SITL for other models",
            file=sys.stderr,
        )
        sys.exit(1)
    try:
        lat, lon, alt, hdg = (float(x) for x in a.home.split(","))
    except ValueError:
        print(f"bad --home {a.home!r}: expected lat,lon,alt,heading", file=sys.stderr)
        sys.exit(1)
    if a.speedup <= 0:
        print("--speedup must be positive", file=sys.stderr)
        sys.exit(1)
    wait = True
    if a.serial0:
        if a.serial0 not in ("tcp:0", "tcp:0:wait"):
            print(f"--serial0 {a.serial0}: the built-in vehicle supports tcp:0 and tcp:0:wait", file=sys.stderr)
            sys.exit(1)
        wait = a.serial0 == "tcp:0:wait"
    defaults = [Path(f) for f in a.defaults.split(",") if f]
    for f in defaults:
        if not f.is_file():
            print(f"--defaults: no such parameter file {f}", file=sys.stderr)
            sys.exit(1)

    from .server import SimConfig, Simulator  # here: --help and a bad command line answer before pymavlink loads

    cfg = SimConfig(
        a.instance,
        a.base_port,
        a.rc_in_port,
        a.speedup,
        (lat, lon, alt, hdg),
        defaults,
        a.wipe,
        a.sysid,
        wait,
        a.ready_delay,
        list(argv),
        a.wind_seed,
    )
    try:
        Simulator(cfg).run()
    except ValueError as e:  # a bad parameter file
        print(str(e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
