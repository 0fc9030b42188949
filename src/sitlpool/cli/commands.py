"""``sitlpool run | kill | reap | serve | attach | demo``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..config import load_settings
from ..errors import ConfigError
from ..leases import Lease, LeasePool, validate_owner
from ..process import UnmanagedManager, kill_instance, reap_orphans, runwrap
from ._common import EXIT_DIED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, err, say

# ---- run: a lease for any command -------------------------------------------------------


PRESET_PLACEHOLDERS = ("model", "home", "speedup", "param_file")


def substitute(args: list[str], lease: Lease, extra: dict[str, str] | None = None) -> list[str]:
    """``{instance}``, the ports' placeholders and ``extra``'s (``--preset``: ``{model}``,
    ``{home}``, ``{speedup}``, ``{param_file}``) replaced in ``args``."""
    p = lease.ports
    values: dict[str, object] = {
        "instance": lease.instance,
        "serial0": p.serial0,
        "serial1": p.serial1,
        "serial2": p.serial2,
        "rc_in": p.rc_in,
        "sim_out": p.sim_out,
        "sim_in": p.sim_in,
        **(extra or {}),
    }
    out = []
    for arg in args:
        for k, v in values.items():
            arg = arg.replace("{" + k + "}", str(v))
        out.append(arg)
    return out


def cmd_run(a: argparse.Namespace) -> int:
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
    preset = None
    if a.preset is not None:  # checked, and its parameter file written, before anything is leased
        from .presets import PresetFiles

        preset = PresetFiles(a.preset, "sitlpool run", s)
        if not any("{" + k + "}" in arg for arg in cmd for k in PRESET_PLACEHOLDERS):
            err(
                f"--preset {a.preset}: the command uses none of {{model}} {{home}} {{speedup}} {{param_file}}, "
                "so the preset changes nothing in it"
            )
    try:
        return _run_leased(a, cmd, owner, s, preset.values if preset else None)
    finally:
        if preset is not None:
            preset.close()


def _run_leased(a: argparse.Namespace, cmd: list[str], owner: str, s, extra: dict | None) -> int:
    lease = LeasePool.from_settings(s).acquire(owner, instance=a.instance, wait=a.wait)
    try:
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
        argv = substitute(cmd, lease, extra)
        print(
            f"sitlpool: instance {lease.instance} leased to {owner}; running {' '.join(argv)}",
            file=sys.stderr,
            flush=True,
        )
        # the command runs under a guardian: whatever it starts (`sh -c 'arducopter ... &'`, a
        # script) dies with `sitlpool run`, SIGKILL included, before the lease is free
        return runwrap.run_guarded(argv, env, a.cwd, lease.shared_fd(), s.data_dir, lease.instance, owner, report=err)
    finally:
        lease.release()


# ---- kill / reap -----------------------------------------------------------------------


def cmd_kill(a: argparse.Namespace) -> int:
    left = runwrap.reap_run(load_settings().data_dir, a.instance)
    if left is not None and left.pids:  # what a killed `sitlpool run` left: proven by its record, killed
        say(f"instance {a.instance}: killed: {left.describe()}")
        return EXIT_OK
    r = kill_instance(a.instance, force=a.force)
    say(r.describe())
    return EXIT_OK


def cmd_reap(a: argparse.Namespace) -> int:
    runs = runwrap.reap_runs(load_settings().data_dir)  # first: what they leave holds leases reap_orphans skips
    reports = reap_orphans()
    for left in runs:
        if left.pids:
            say(f"instance {left.record.instance}: killed: {left.describe()}")
    if not reports and not any(left.pids for left in runs):
        print("nothing to reap: no pid file names an orphan")
    for r in reports:
        say(r.describe())  # an entry of sessions/ that names no instance has none
    return EXIT_OK


# ---- serve: the MCP server -------------------------------------------------------------


def cmd_serve(a: argparse.Namespace) -> int:
    # the MCP server only when serving: every other command skips its imports
    from ..server import serve, serve_stdio

    if a.http is None:  # stdio: answer initialize while the MCP SDK loads
        return serve_stdio(a.host, ray=a.ray)
    return serve(a.http, a.host, ray=a.ray)


# ---- attach: watch a SITL live ----------------------------------------------------------


def cmd_attach(a: argparse.Namespace) -> int:
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
    status = h.status
    err(f"the watched SITL died: {status.reason if status else 'it exited'}")
    return EXIT_DIED


# ---- demo ------------------------------------------------------------------------------


def cmd_demo(a: argparse.Namespace) -> int:
    from ..demo import demo  # pymavlink and the flight layer: only the demo flies

    def report(msg: str) -> None:
        print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    try:
        demo(binary=a.binary, speedup=a.speedup, hold_s=a.hold, say=report)
    except KeyboardInterrupt:  # demo() said so and cleaned up
        return EXIT_INTERRUPTED
    report("demo complete")
    return EXIT_OK
