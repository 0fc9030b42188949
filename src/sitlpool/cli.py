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


def say(text: str, file=None) -> None:
    """Print a report that may quote others' text (pid files, names in sessions/, argv) without
    the escape sequences it may hold: they would drive the reader's terminal."""
    from .process.managed import printable

    print(printable(text), file=file or sys.stdout, flush=True)


def err(msg: str) -> None:
    say(f"sitlpool: {msg}", file=sys.stderr)


# ---- argument types: each bad value is a one-line usage error (exit 2) -----------------------


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (what, and where to read more)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message}; see '{self.prog} --help'\n")


def _typed(fn):
    """An argparse ``type`` from a parser raising our errors: argparse prints the message."""

    def convert(text: str):
        try:
            return fn(text)
        except (SitlpoolError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = fn.__name__
    return convert


@_typed
def instance_arg(text: str) -> int:
    from .instances import parse_instance

    return parse_instance(text)


@_typed
def port_arg(text: str) -> int:
    from .instances import parse_port

    return parse_port(text)


_DECIMAL = r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


def _number(text: str, what: str, low: float, high: float = float("inf"), low_ok: bool = True) -> float:
    import math
    import re

    # float() also takes 'nan', 'inf', '1_0' and '١٠': none of them is a duration or a speed
    x = float(text) if re.fullmatch(_DECIMAL, text) else math.nan
    if not math.isfinite(x) or x < low or (x == low and not low_ok) or x > high:
        rng = f"{'at least' if low_ok else 'above'} {low:g}" + (
            f" and at most {high:g}" if high != float("inf") else ""
        )
        raise argparse.ArgumentTypeError(f"{what} must be a number {rng}, not {text!r}")
    return x


def seconds_arg(text: str) -> float:
    return _number(text, "seconds", 0)


def timeout_arg(text: str) -> float:
    return _number(text, "timeout", 0, low_ok=False)


def speedup_arg(text: str) -> float:
    return _number(text, "speedup", 0, 1000, low_ok=False)


def hold_arg(text: str) -> float:
    return _number(text, "hold", 0)


@_typed
def target_arg(text: str) -> dict:
    """``attach``'s target: an instance number, or an endpoint ``tcp:HOST:PORT``."""
    from .instances import parse_instance, parse_port, strict_int
    from .mavlink.endpoints import parse_endpoint

    if strict_int(text) is not None:
        return {"instance": parse_instance(text), "text": text}
    if ":" not in text:
        raise ValueError(
            f"{text!r} is neither an instance number (e.g. 40) nor an endpoint tcp:HOST:PORT (e.g. tcp:127.0.0.1:5760)"
        )
    parse_port(text.rpartition(":")[2])  # int() would take '٥٧٦٠' and '5_760'
    parse_endpoint(text)
    return {"endpoint": text, "text": text}


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
        h["sitl"] = (
            None
            if rec is None
            else {"pid": rec.pid, "binary": rec.binary, "alive": procinfo.is_alive(rec.pid, rec.start_ticks)}
        )
    # an instance nobody holds but whose ports a process took (a SITL started without a
    # lease) is "ports taken", never free: acquire would skip it
    av = pool.availability({h["instance"] for h in doc["held"]}).as_dict()
    doc["running_without_lease"] = [d.as_dict() for d in discover(s, pool)]
    doc["free_count"] = len(av["free"])
    doc["ports_taken"] = av["ports_taken"]
    if all_:
        doc["free"] = av["free"]
    from . import statefile

    doc["live"] = statefile.read_all(s.data_dir)  # what each launcher's link last saw (stale if it is gone)
    return doc


def program_name(executable: str | None, cmdline: list[str] | None) -> str:
    """What a person calls the program: ``arducopter``, ``sitlpool-sim``, ``sitlpool.sim``
    for ``python -m sitlpool.sim`` (a venv's interpreter path says nothing)."""
    argv = list(cmdline or [])
    exe = os.path.basename(executable or (argv[0] if argv else "") or "?")
    if exe.startswith("python") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            return argv[2]
        if not argv[1].startswith("-"):
            return os.path.basename(argv[1])
    return exe


def status_table(doc: dict):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .leases import format_age
    from .process.managed import printable

    # every cell is a Text, never a str: rich reads a str as markup, so an owner, a path or a
    # process's argv holding "[/]" made status fail for everyone, and "[link=...]" forged links;
    # printable() drops the escape sequences another user's text could send to our terminal
    def cell(value) -> Text:
        return Text(printable(str(value)))

    t = Table(title=cell(f"leases in {doc['lock_dir']} (pool {doc['pool']})"), title_justify="left")
    for c in ("instance", "owner", "pid", "age", "in pool", "SITL (pid file)"):
        t.add_column(c)
    for h in doc["held"]:
        owner = h["owner"] or f"? (lock file names {h['record_owner']} pid {h['record_pid']})"
        sitl = h["sitl"]
        sitl_text = (
            "-"
            if sitl is None
            else (f"{program_name(sitl['binary'], None)} pid {sitl['pid']} {'running' if sitl['alive'] else 'gone'}")
        )
        pid = h["pid"]
        if h.get("kept_by"):  # `sitlpool run` killed, its command still holding the lease
            pid = f"{pid} exited; kept by pid {', '.join(map(str, h['kept_by']))}"
        t.add_row(
            *map(cell, (h["instance"], owner, pid, format_age(h["age_s"]), "yes" if h["in_pool"] else "no", sitl_text))
        )
    parts = [t if doc["held"] else Text("no instance is leased")]
    if doc["running_without_lease"]:
        u = Table(title="SITLs running without a lease", title_justify="left")
        for c in ("instance", "pid", "program", "clients", "free to attach"):
            u.add_column(c)
        for d in doc["running_without_lease"]:
            cl = "; ".join(f"{k}: {', '.join(v)}" for k, v in d["clients"].items() if v) or "none"
            u.add_row(
                *map(
                    cell,
                    (
                        d["instance"],
                        d["pid"],
                        program_name(d["executable"], d["cmdline"]),
                        cl,
                        d["free_to_attach"] or "no",
                    ),
                )
            )
        parts.append(u)
    if doc.get("live"):
        from .statefile import describe

        lv = Table(title="live state (from the launchers' state files)", title_justify="left")
        for c in ("instance", "SITL pid", "state"):
            lv.add_column(c)
        for d in doc["live"]:
            lv.add_row(*map(cell, (d["instance"], d.get("sitl_pid") or "-", describe(d))))
        parts.append(lv)
    line = f"{doc['free_count']} free in the pool"
    if "free" in doc:
        line += ": " + ", ".join(map(str, doc["free"]))
    if doc["ports_taken"]:
        if "free" in doc:  # --all: who took them
            line += "; ports taken: " + "; ".join(
                f"{t['instance']} ({', '.join(t['ports'])})" for t in doc["ports_taken"]
            )
        else:
            line += "; ports taken: " + ", ".join(str(t["instance"]) for t in doc["ports_taken"])
    parts.append(cell(line))
    return Group(*parts)


def cmd_status(a) -> int:
    if getattr(a, "ray", None) is not None:
        from .fleet import cli as fleet_cli

        return fleet_cli.cmd_status(a)
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
    values = {
        "instance": lease.instance,
        "serial0": p.serial0,
        "serial1": p.serial1,
        "serial2": p.serial2,
        "rc_in": p.rc_in,
        "sim_out": p.sim_out,
        "sim_in": p.sim_in,
    }
    out = []
    for arg in args:
        for k, v in values.items():
            arg = arg.replace("{" + k + "}", str(v))
        out.append(arg)
    return out


def cmd_run(a) -> int:
    from . import procinfo
    from .config import load_settings
    from .errors import ConfigError
    from .leases import LeasePool, validate_owner

    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        err("run needs a command after --, e.g. sitlpool run -- sitlpool-sim -I {instance} --model quad")
        return EXIT_USAGE
    if a.owner is not None:
        owner = validate_owner(a.owner)
    else:
        name = "".join(c if c.isprintable() else "?" for c in os.path.basename(cmd[0]))[:60]
        owner = f"sitlpool run {name} (pid {os.getpid()})"
    if a.cwd is not None and not os.path.isdir(a.cwd):
        raise ConfigError(f"--cwd {a.cwd}: not a directory; create it or name an existing one")
    s = load_settings()
    lease = LeasePool.from_settings(s).acquire(owner, instance=a.instance, wait=a.wait)
    p = lease.ports
    env = dict(
        os.environ,
        SITLPOOL_INSTANCE=str(lease.instance),
        SITLPOOL_SERIAL0=str(p.serial0),
        SITLPOOL_SERIAL1=str(p.serial1),
        SITLPOOL_SERIAL2=str(p.serial2),
        SITLPOOL_RC_IN=str(p.rc_in),
        SITLPOOL_SIM_OUT=str(p.sim_out),
        SITLPOOL_SIM_IN=str(p.sim_in),
    )
    argv = substitute(cmd, lease)
    print(
        f"sitlpool: instance {lease.instance} leased to {owner}; running {' '.join(argv)}", file=sys.stderr, flush=True
    )
    # a command that starts a SITL in the background and exits (`sh -c 'arducopter ... &'`)
    # must not leave it running on an instance whose lease we then release: its orphans come to us
    procinfo.become_subreaper()
    before = set(procinfo.children(os.getpid()))  # cli.main may run inside a process with children of its own
    try:
        # the command holds the lease too: if this process is SIGKILLed, the instance stays
        # leased until the command (which may ignore the SIGTERM it then gets) exits
        tied = procinfo.die_with_parent(os.getpid(), sig=signal.SIGTERM)  # TERM: the command may clean up
        shared = lease.shared_fd()
        try:
            child = subprocess.Popen(argv, env=env, cwd=a.cwd, preexec_fn=tied, pass_fds=(shared,))
        finally:
            os.close(shared)
    except OSError as e:
        lease.release()
        err(f"cannot run {argv[0]}: {e.strerror}; check the command name and PATH")
        return 127

    asked = []

    def forward(signum, _frame):
        # a second request to stop a command that ignored the first ends it (SIGKILL): a
        # command ignoring SIGTERM must not make `sitlpool run` (and its lease) unstoppable
        asked.append(signum)
        if len(asked) > 1:
            signum = signal.SIGKILL
        # Ctrl-C at a terminal already reached the child (same foreground group): don't send it twice
        elif signum == signal.SIGINT:
            try:
                if os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp():
                    return
            except OSError:
                pass
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        code = child.wait()
        left = procinfo.stop_leftovers(spare=before)
        if left:
            err(
                f"{os.path.basename(argv[0])} left {len(left)} process(es) running (pid {', '.join(map(str, left))}); "
                f"stopped them before releasing instance {lease.instance}"
            )
    finally:
        lease.release()
    return code if code >= 0 else 128 - code


# ---- kill / reap -----------------------------------------------------------------------


def cmd_kill(a) -> int:
    from .process import kill_instance

    r = kill_instance(a.instance, force=a.force)
    say(r.describe())
    return EXIT_OK


def cmd_reap(a) -> int:
    from .process import reap_orphans

    reports = reap_orphans()
    if not reports:
        print("nothing to reap: no pid file names an orphan")
    for r in reports:
        say(r.describe())  # an entry of sessions/ that names no instance has none
    return EXIT_OK


# ---- serve: the MCP server -------------------------------------------------------------


def cmd_serve(a) -> int:
    if a.http is None:  # stdio: answer initialize while the MCP SDK loads
        from .stdio_wire import serve

        return serve(a.host, ray=a.ray)
    from .server import serve

    return serve(a.http, a.host, ray=a.ray)


# ---- attach: watch a SITL live ----------------------------------------------------------


def cmd_attach(a) -> int:
    from .process import UnmanagedManager

    m = UnmanagedManager()
    target = dict(a.target)
    text = target.pop("text")
    h = m.start("attach", timeout=a.timeout, **target)
    try:
        print(f"attached to {text} (pid {h.pid or '?'}) on {h.link.endpoint}, read-only; Ctrl-C to detach", flush=True)
        while not h.join(1.0):
            v = h.link.vehicle
            alt = f"{v.rel_alt:.1f} m" if v.rel_alt is not None else "?"
            print(
                f"{time.strftime('%H:%M:%S')}  mode {v.mode}  {'ARMED' if v.armed else 'disarmed'}  alt {alt}  "
                f"heartbeat {v.heartbeat_age():.1f}s ago",
                flush=True,
            )
    except KeyboardInterrupt:
        h.kill(wait=True)
        print("detached; the SITL was left running")
        return EXIT_OK
    err(f"the watched SITL died: {h.status.reason}")
    return EXIT_DIED


# ---- demo ------------------------------------------------------------------------------


def cmd_demo(a) -> int:
    from .flight import demo

    say = lambda msg: print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)  # noqa: E731
    try:
        demo(binary=a.binary, speedup=a.speedup, hold_s=a.hold, say=say)
    except KeyboardInterrupt:  # demo() said so and cleaned up
        return EXIT_INTERRUPTED
    say("demo complete")
    return EXIT_OK


# ---- main ------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="sitlpool",
        description="Share ArduPilot SITL instances safely on one workstation.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 SITL died, 130 interrupted; run: its command's code",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("status", help="who holds which instance, SITLs running without a lease")
    s.add_argument("--json", action="store_true", help="machine-readable (schema 1, see README)")
    s.add_argument("--all", action="store_true", help="also list the free pool instances")
    s.add_argument("--watch", action="store_true", help="refresh in place every second")
    s.set_defaults(fn=cmd_status)
    from .fleet import cli as fleet_cli  # no Ray import: only argparse wiring (ray-resources, batch, status --ray)

    fleet_cli.add_status_option(s)
    fleet_cli.add_subcommands(sub)
    r = sub.add_parser(
        "run",
        help="lease an instance and run a command holding it",
        description="Placeholders {instance} {serial0} {serial1} {serial2} {rc_in} {sim_out} {sim_in} are replaced; "
        "SITLPOOL_INSTANCE and SITLPOOL_SERIAL0.. are exported.",
    )
    r.add_argument("--instance", type=instance_arg)
    r.add_argument("--wait", type=seconds_arg, default=0, metavar="SECONDS", help="wait this long for a free instance")
    r.add_argument("--owner", help="holder name shown to others (at most 200 characters)")
    r.add_argument(
        "--cwd", metavar="DIR", help="run CMD in DIR (a SITL writes eeprom.bin, logs/ and terrain/ into its cwd)"
    )
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    r.set_defaults(fn=cmd_run)
    k = sub.add_parser("kill", help="kill the stray SITL on an instance nobody holds")
    k.add_argument("instance", type=instance_arg)
    k.add_argument("--force", action="store_true", help="also for reserved or out-of-pool instances")
    k.set_defaults(fn=cmd_kill)
    sub.add_parser("reap", help="kill SITLs whose launcher died (only what nobody holds)").set_defaults(fn=cmd_reap)
    at = sub.add_parser("attach", help="watch a SITL live without disturbing it")
    at.add_argument("target", type=target_arg, help="instance number or tcp:HOST:PORT")
    at.add_argument("--timeout", type=timeout_arg, default=10, metavar="SECONDS")
    at.set_defaults(fn=cmd_attach)
    sv = sub.add_parser("serve", help="the MCP server (stdio, or streamable HTTP on loopback)")
    sv.add_argument("--http", type=port_arg, metavar="PORT")
    sv.add_argument("--host", default="127.0.0.1", help="loopback only")
    sv.add_argument(
        "--ray",
        metavar="ADDRESS",
        type=fleet_cli.ray_address,
        help="place open_sitl sessions on this Ray cluster (HOST:PORT of its head)",
    )
    sv.set_defaults(fn=cmd_serve)
    sm = sub.add_parser("sim", help="the built-in vehicle (same flags as SITL)", add_help=False)
    sm.add_argument("args", nargs=argparse.REMAINDER)
    sm.set_defaults(fn=lambda a: __import__("sitlpool.sim.__main__", fromlist=["main"]).main(a.args) or 0)
    d = sub.add_parser("demo", help="lease, launch, fly a short hop, clean up")
    d.add_argument(
        "--binary", help="a real ArduPilot SITL binary (default: SITLPOOL_SITL_BINARY or the built-in vehicle)"
    )
    d.add_argument("--speedup", type=speedup_arg, default=2)
    d.add_argument("--hold", type=hold_arg, default=5, help="seconds of sim time to hover")
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
