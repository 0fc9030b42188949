"""``sitlpool``: status for people, a lease for any command, kill/reap, attach, serve, sim, demo.

Exit codes: 0 success; 1 an error (one line, naming what and what to do); 2 bad usage;
3 the watched or flown SITL died; 130 interrupted (Ctrl-C). ``sitlpool run`` exits
with its command's code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from .errors import SitlpoolError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def err(msg: str) -> None:
    print(f"sitlpool: {msg}", file=sys.stderr, flush=True)


# ---- status ----------------------------------------------------------------------------


def status_doc(all_: bool) -> dict:
    """``python -m sitlpool.leases status``'s document, plus each lease's SITL (from its
    pid file), the SITLs running without a lease, and the free instances."""
    from . import pidfiles, procinfo
    from .config import load_settings
    from .leases import LeasePool, status_document
    from .process import discover

    s = load_settings()
    pool = LeasePool.from_settings(s, check=False)
    doc = {"schema": 1, **status_document(pool)}
    for h in doc["held"]:
        rec = pidfiles.read(s.data_dir, h["instance"])
        h["sitl"] = None if rec is None else {
            "pid": rec.pid, "binary": rec.binary, "alive": procinfo.is_alive(rec.pid, rec.start_ticks)}
    held = {h["instance"] for h in doc["held"]}
    free = [n for n in s.pool if n not in held]
    doc["running_without_lease"] = [d.as_dict() for d in discover(s, pool)]
    doc["free_count"] = len(free)
    if all_:
        doc["free"] = free
    return doc


def status_table(doc: dict):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .leases import format_age

    t = Table(title=f"leases in {doc['lock_dir']} (pool {doc['pool']})", title_justify="left")
    for c in ("instance", "owner", "pid", "age", "in pool", "SITL (pid file)"):
        t.add_column(c)
    for h in doc["held"]:
        owner = h["owner"] or f"? (lock file names {h['record_owner']} pid {h['record_pid']})"
        sitl = h["sitl"]
        sitl_text = "-" if sitl is None else f"pid {sitl['pid']} {'running' if sitl['alive'] else 'gone'}"
        t.add_row(str(h["instance"]), owner, str(h["pid"]), format_age(h["age_s"]), "yes" if h["in_pool"] else "no", sitl_text)
    parts = [t if doc["held"] else Text("no instance is leased")]
    if doc["running_without_lease"]:
        u = Table(title="SITLs running without a lease", title_justify="left")
        for c in ("instance", "pid", "executable", "clients", "free to attach"):
            u.add_column(c)
        for d in doc["running_without_lease"]:
            cl = "; ".join(f"{k}: {', '.join(v)}" for k, v in d["clients"].items() if v) or "none"
            u.add_row(str(d["instance"]), str(d["pid"]), str(d["executable"]), cl, d["free_to_attach"] or "no")
        parts.append(u)
    line = f"{doc['free_count']} free in the pool"
    if "free" in doc:
        line += ": " + ", ".join(map(str, doc["free"]))
    parts.append(Text(line))
    return Group(*parts)


def cmd_status(a) -> int:
    if a.json:
        print(json.dumps(status_doc(a.all), indent=2))
        return EXIT_OK
    from rich.console import Console

    console = Console()
    if not a.watch:
        console.print(status_table(status_doc(a.all)))
        return EXIT_OK
    from rich.live import Live

    try:
        with Live(status_table(status_doc(a.all)), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(1)
                live.update(status_table(status_doc(a.all)))
    except KeyboardInterrupt:
        return EXIT_OK  # Ctrl-C is how a watch ends


# ---- run: a lease for any command -------------------------------------------------------


def substitute(args: list[str], lease) -> list[str]:
    p = lease.ports
    values = {"instance": lease.instance, "serial0": p.serial0, "serial1": p.serial1, "serial2": p.serial2,
              "rc_in": p.rc_in, "sim_out": p.sim_out, "sim_in": p.sim_in}
    out = []
    for arg in args:
        for k, v in values.items():
            arg = arg.replace("{" + k + "}", str(v))
        out.append(arg)
    return out


def _pdeathsig():
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the lease holder
    except (OSError, AttributeError):
        pass


def cmd_run(a) -> int:
    from .config import load_settings
    from .leases import LeasePool

    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        err("run needs a command after --, e.g. sitlpool run -- sitlpool-sim -I {instance} --model quad")
        return EXIT_USAGE
    s = load_settings()
    owner = a.owner or f"sitlpool run {os.path.basename(cmd[0])} (pid {os.getpid()})"
    lease = LeasePool.from_settings(s).acquire(owner, instance=a.instance, wait=a.wait)
    p = lease.ports
    env = dict(os.environ, SITLPOOL_INSTANCE=str(lease.instance), SITLPOOL_SERIAL0=str(p.serial0),
               SITLPOOL_SERIAL1=str(p.serial1), SITLPOOL_SERIAL2=str(p.serial2), SITLPOOL_RC_IN=str(p.rc_in),
               SITLPOOL_SIM_OUT=str(p.sim_out), SITLPOOL_SIM_IN=str(p.sim_in))
    argv = substitute(cmd, lease)
    print(f"sitlpool: instance {lease.instance} leased to {owner}; running {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        child = subprocess.Popen(argv, env=env, preexec_fn=_pdeathsig)
    except OSError as e:
        lease.release()
        err(f"cannot run {argv[0]}: {e.strerror}; check the command name and PATH")
        return 127

    def forward(signum, _frame):
        # Ctrl-C at a terminal already reached the child (same foreground group): don't send it twice
        if signum == signal.SIGINT:
            try:
                if os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp():
                    return
            except OSError:
                pass
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        code = child.wait()
    finally:
        lease.release()
    return code if code >= 0 else 128 - code


# ---- kill / reap -----------------------------------------------------------------------


def cmd_kill(a) -> int:
    from .process import kill_instance

    r = kill_instance(a.instance, force=a.force)
    print(r.describe())
    return EXIT_OK


def cmd_reap(a) -> int:
    from .process import reap_orphans

    reports = reap_orphans()
    if not reports:
        print("nothing to reap: no pid file names an orphan")
    for r in reports:
        print(f"instance {r.instance}: {r.action}: {r.reason}")
    return EXIT_OK


# ---- attach: watch a SITL live ----------------------------------------------------------


def parse_target(text: str) -> dict:
    return {"instance": int(text)} if text.isdigit() else {"endpoint": text}


def cmd_attach(a) -> int:
    from .process import UnmanagedManager

    m = UnmanagedManager()
    h = m.start("attach", timeout=a.timeout, **parse_target(a.target))
    try:
        print(f"attached to {a.target} (pid {h.pid or '?'}) on {h.link.endpoint}, read-only; Ctrl-C to detach", flush=True)
        while not h.join(1.0):
            v = h.link.vehicle
            alt = f"{v.rel_alt:.1f} m" if v.rel_alt is not None else "?"
            print(f"{time.strftime('%H:%M:%S')}  mode {v.mode}  {'ARMED' if v.armed else 'disarmed'}  alt {alt}  "
                  f"heartbeat {v.heartbeat_age():.1f}s ago", flush=True)
    except KeyboardInterrupt:
        h.kill(wait=True)
        print("detached; the SITL was left running")
        return EXIT_OK
    err(f"the watched SITL died: {h.status.reason}")
    return EXIT_DIED


# ---- demo ------------------------------------------------------------------------------


def cmd_demo(a) -> int:
    from .config import load_settings
    from .process import ManagedManager

    overrides = {"sitl_binary": a.binary} if a.binary else {}
    s = load_settings(**overrides)
    say = lambda msg: print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)  # noqa: E731
    m = ManagedManager(s)
    h = None
    try:
        from .config import format_pool

        say(f"leasing an instance from pool {format_pool(s.pool)} and launching "
            f"{s.sitl_binary or 'the built-in vehicle'} (speedup {a.speedup:g})")
        h = m.start("demo", speedup=a.speedup, owner=f"sitlpool demo (pid {os.getpid()})")
        link = h.link
        say(f"instance {h.instance}: SITL pid {h.pid} ready, MAVLink on tcp:127.0.0.1:{h.ports.serial0}")
        say("waiting for GPS and EKF (pre-arm checks)...")
        if not link.wait(lambda v: v.home is not None or (v.gps_fix or 0) >= 3, 90):
            raise SitlpoolError("the vehicle never got a position estimate; see its STATUSTEXTs with sitlpool attach")
        link.set_mode("GUIDED")
        link.arm_when_ready(60, retry_every=1.0, on_refused=lambda e: say(f"not armable yet ({e}); retrying"))
        say("armed; taking off to 10 m")
        link.takeoff(10)
        last = -1.0
        while not link.wait(lambda v: (v.rel_alt or 0) >= 9.5, 1.0):
            alt = link.vehicle.rel_alt or 0
            if alt - last >= 1:
                say(f"climbing: {alt:.1f} m")
                last = alt
            if h.dead:
                raise SitlpoolError(f"the SITL died in flight: {h.status.reason}")
        say(f"at {link.vehicle.rel_alt:.1f} m; holding for {a.hold:g} s")
        time.sleep(a.hold / max(1.0, a.speedup))
        say("landing")
        link.land()
        if not link.wait(lambda v: not v.armed, 120):
            raise SitlpoolError("the vehicle did not land and disarm within 120 s")
        say(f"landed and disarmed at {link.vehicle.rel_alt:.1f} m")
    except KeyboardInterrupt:
        say("interrupted: cleaning up")
        return EXIT_INTERRUPTED
    finally:
        if h is not None and not h.dead:
            h.kill(wait=True)
        m.close_all()
        if h is not None:
            say(f"SITL stopped, instance {h.instance} released")
    say("demo complete")
    return EXIT_OK


# ---- main ------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sitlpool", description="Share ArduPilot SITL instances safely on one workstation.",
                                epilog="exit codes: 0 ok, 1 error, 2 usage, 3 SITL died, 130 interrupted; run: its command's code")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("status", help="who holds which instance, SITLs running without a lease")
    s.add_argument("--json", action="store_true", help="machine-readable (schema 1, see README)")
    s.add_argument("--all", action="store_true", help="also list the free pool instances")
    s.add_argument("--watch", action="store_true", help="refresh in place every second")
    s.set_defaults(fn=cmd_status)
    r = sub.add_parser("run", help="lease an instance and run a command holding it",
                       description="Placeholders {instance} {serial0} {serial1} {serial2} {rc_in} {sim_out} {sim_in} are replaced; "
                                   "SITLPOOL_INSTANCE and SITLPOOL_SERIAL0.. are exported.")
    r.add_argument("--instance", type=int)
    r.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait this long for a free instance")
    r.add_argument("--owner", help="holder name shown to others")
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    r.set_defaults(fn=cmd_run)
    k = sub.add_parser("kill", help="kill the stray SITL on an instance nobody holds")
    k.add_argument("instance", type=int)
    k.add_argument("--force", action="store_true", help="also for reserved or out-of-pool instances")
    k.set_defaults(fn=cmd_kill)
    sub.add_parser("reap", help="kill SITLs whose launcher died (only what nobody holds)").set_defaults(fn=cmd_reap)
    at = sub.add_parser("attach", help="watch a SITL live without disturbing it")
    at.add_argument("target", help="instance number or tcp:HOST:PORT")
    at.add_argument("--timeout", type=float, default=10)
    at.set_defaults(fn=cmd_attach)
    sv = sub.add_parser("serve", help="the MCP server (stdio, or streamable HTTP on loopback)")
    sv.add_argument("--http", type=int, metavar="PORT")
    sv.add_argument("--host", default="127.0.0.1", help="loopback only")
    sv.set_defaults(fn=lambda a: __import__("sitlpool.server", fromlist=["serve"]).serve(a.http, a.host))
    sm = sub.add_parser("sim", help="the built-in vehicle (same flags as SITL)", add_help=False)
    sm.add_argument("args", nargs=argparse.REMAINDER)
    sm.set_defaults(fn=lambda a: __import__("sitlpool.sim.__main__", fromlist=["main"]).main(a.args) or 0)
    d = sub.add_parser("demo", help="lease, launch, fly a short hop, clean up")
    d.add_argument("--binary", help="a real ArduPilot SITL binary (default: SITLPOOL_SITL_BINARY or the built-in vehicle)")
    d.add_argument("--speedup", type=float, default=2)
    d.add_argument("--hold", type=float, default=5, help="seconds of sim time to hover")
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["sim"]:  # every flag belongs to the vehicle, not to sitlpool
        from .sim.__main__ import main as sim_main

        sim_main(args[1:])
        return EXIT_OK
    a = parser().parse_args(args)
    try:
        return a.fn(a)
    except SitlpoolError as e:
        err(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
