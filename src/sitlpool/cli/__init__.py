"""``sitlpool``: status for people, a lease for any command, kill/reap, attach, serve, sim, demo.

Exit codes: 0 success; 1 an error (one line, naming what and what to do); 2 bad usage;
3 the watched or flown SITL died; 130 interrupted (Ctrl-C). ``sitlpool run`` exits
with its command's code. One module per command group: ``status``, ``commands``
(run, kill, reap, serve, attach, demo); ``_common`` holds the argument types.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import SitlpoolError
from ..fleet import cli as fleet_cli  # no Ray import: only argparse wiring (ray-resources, batch, status --ray)
from ._common import (
    EXIT_DIED,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    err,
    hold_arg,
    instance_arg,
    port_arg,
    say,
    seconds_arg,
    speedup_arg,
    target_arg,
    timeout_arg,
)
from .ab import add_parser as add_ab_parser
from .ab import extend_batch_parser
from .commands import cmd_attach, cmd_demo, cmd_kill, cmd_reap, cmd_run, cmd_serve, substitute
from .dashboard import add_parser as add_dashboard_parser
from .fly import add_parser as add_fly_parser
from .logs import add_parser as add_logs_parser
from .mission import add_parser as add_mission_parser
from .presets import add_parser as add_presets_parser
from .status import cmd_status, program_name, status_doc, status_table
from .watch import add_parser as add_watch_parser

__all__ = [
    "EXIT_DIED",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "cmd_attach",
    "cmd_demo",
    "cmd_kill",
    "cmd_reap",
    "cmd_run",
    "cmd_serve",
    "cmd_status",
    "err",
    "main",
    "parser",
    "program_name",
    "say",
    "status_doc",
    "status_table",
    "substitute",
]


def _sim(a: argparse.Namespace) -> int:
    from ..sim.__main__ import main as sim_main  # the built-in vehicle: only `sitlpool sim` runs it

    args, name = _pop_preset(list(a.args))
    if name is None:
        sim_main(args)
        return EXIT_OK
    from .presets import PresetFiles, sim_args

    files = PresetFiles(name, "sitlpool sim")
    try:
        sim_main(sim_args(args, files))  # the vehicle reads its --defaults files at boot
    finally:
        files.close()
    return EXIT_OK


def _pop_preset(args: list[str]) -> tuple[list[str], str | None]:
    """``sitlpool sim``'s ``--preset NAME`` (or ``--preset=NAME``) taken out of the vehicle's flags."""
    for i, x in enumerate(args):
        if x == "--preset":
            if i + 1 >= len(args) or not args[i + 1] or args[i + 1].startswith("-"):
                raise SitlpoolError("sitlpool sim --preset needs a preset's name (sitlpool presets lists them)")
            return args[:i] + args[i + 2 :], args[i + 1]
        if x.startswith("--preset="):
            return args[:i] + args[i + 1 :], x.split("=", 1)[1]
    return args, None


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="sitlpool",
        description="Share ArduPilot SITL instances safely on one workstation.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 SITL died, 130 interrupted; run: its command's code",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("status", help="who holds which instance, SITLs running without a lease")
    s.add_argument("--json", action="store_true", help="machine-readable (schema 1, see docs/cli.md)")
    s.add_argument("--all", action="store_true", help="also list the free pool instances")
    s.add_argument("--watch", action="store_true", help="refresh in place every second")
    s.set_defaults(fn=cmd_status)
    fleet_cli.add_status_option(s)
    fleet_cli.add_subcommands(sub)
    extend_batch_parser(sub.choices["batch"])  # sitlpool batch --variants: an A/B batch on Ray
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
    r.add_argument(
        "--preset",
        metavar="NAME",
        help="a preset for the command: {model} {home} {speedup} {param_file} (its files' values, then its params)",
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
    sm = sub.add_parser("sim", help="the built-in vehicle (same flags as SITL, and --preset NAME)", add_help=False)
    sm.add_argument("args", nargs=argparse.REMAINDER)
    sm.set_defaults(fn=_sim)
    d = sub.add_parser("demo", help="lease, launch, fly a short hop, clean up")
    d.add_argument(
        "--binary", help="a real ArduPilot SITL binary (default: SITLPOOL_SITL_BINARY or the built-in vehicle)"
    )
    d.add_argument("--speedup", type=speedup_arg, default=5, help="sim seconds per wall second (default 5)")
    d.add_argument("--hold", type=hold_arg, default=5, help="seconds of sim time to hover")
    d.set_defaults(fn=cmd_demo)
    add_logs_parser(sub)
    add_fly_parser(sub)
    add_dashboard_parser(sub)
    add_presets_parser(sub)
    add_watch_parser(sub)
    add_ab_parser(sub)
    add_mission_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["sim"]:  # every flag belongs to the vehicle (but --preset), not to sitlpool
        try:
            return _sim(argparse.Namespace(args=args[1:]))
        except SitlpoolError as e:
            err(str(e))
            return EXIT_ERROR
    a = parser().parse_args(args)
    try:
        code: int = a.fn(a)
        return code
    except SitlpoolError as e:
        err(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
