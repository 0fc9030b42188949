"""The sitlpool CLI end to end, as subprocesses."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Gcs, hold_lease, listening, start_sim, wait_for
from sitlpool import procinfo
from sitlpool.instances import ports
from sitlpool.leases import LeasePool

BIN = Path(sys.executable).parent
CHECKOUT = Path(__file__).resolve().parents[2]
#: what a vehicle writes into its cwd: never into the checkout
VEHICLE_FILES = ("eeprom.bin", "logs", "terrain")


def _vehicle_files_in_checkout() -> dict[str, float]:
    return {n: (CHECKOUT / n).stat().st_mtime for n in VEHICLE_FILES if (CHECKOUT / n).exists()}


@pytest.fixture(autouse=True, scope="module")
def checkout_stays_clean():
    """Nothing these tests run (the demo, `sitlpool run`, ./dev) writes into the checkout."""
    before = _vehicle_files_in_checkout()
    yield
    after = _vehicle_files_in_checkout()
    new = sorted(n for n, t in after.items() if before.get(n) != t)
    assert not new, f"written into the checkout {CHECKOUT}: {new}"


def sitlpool(*args, env, timeout=120, **kw):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def test_status_text_and_json(env, procs, lock_dir, instances, tmp_path):
    inside = hold_lease(procs, lock_dir, instances[0], "sitlpool session abc123 (mine)")
    hold_lease(procs, lock_dir, instances[5] + 50, "mcardupilot session ffffff (theirs)")
    n = instances[3]
    sim = start_sim(procs, tmp_path / "foreign", n, "--serial0", "tcp:0")
    wait_for(lambda: listening(ports(n).serial1))
    r = sitlpool("status", "--json", "--all", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["lock_dir"] == env["SITLPOOL_DATA_DIR"] + "/leases"
    held = {h["instance"]: h for h in doc["held"]}
    assert held[instances[0]]["pid"] == inside.pid and held[instances[0]]["in_pool"]
    assert (
        held[instances[5] + 50]["owner"] == "mcardupilot session ffffff (theirs)"
        and not held[instances[5] + 50]["in_pool"]
    )
    foreign = {d["instance"]: d for d in doc["running_without_lease"]}
    assert foreign[n]["pid"] == sim.pid and foreign[n]["free_to_attach"] == "serial1"
    # instance n is not leased but its ports are taken: never "free" (issue 12 item 13)
    assert doc["free_count"] == 4 and doc["free"] == [i for i in instances[1:] if i != n]
    [taken] = doc["ports_taken"]
    assert taken["instance"] == n and any(f"pid {sim.pid}" in b for b in taken["ports"])
    assert foreign[n]["executable"].startswith("/")  # the full path in JSON
    assert held[instances[0]]["sitl"] is None  # no pid file: nothing launched through sitlpool
    r = sitlpool("status", env=dict(env, COLUMNS="200"))
    assert r.returncode == 0
    assert "sitlpool session abc123 (mine)" in r.stdout and str(inside.pid) in r.stdout
    assert "mcardupilot session ffffff (theirs)" in r.stdout
    assert "SITLs running without a lease" in r.stdout and str(sim.pid) in r.stdout
    assert "4 free in the pool" in r.stdout and f"ports taken: {n}" in r.stdout
    r = sitlpool("status", "--all", env=dict(env, COLUMNS="200"))
    assert f"ports taken: {n} (" in r.stdout and f"pid {sim.pid}" in r.stdout
    # the table names the program (python -m sitlpool.sim), not the first characters of a path
    assert any(str(sim.pid) in line and "sitlpool.sim" in line for line in r.stdout.splitlines()), r.stdout
    assert sys.executable[:15] not in r.stdout


def test_bad_setting_is_one_line(env):
    r = sitlpool("status", env=dict(env, SITLPOOL_POOL="0-3"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "SITLPOOL_POOL" in r.stderr and "leave instance 0 out of the pool" in r.stderr


RUN_PROBE = """
import os, sys, time
print("ARGS", *sys.argv[1:], flush=True)
print("ENV", os.environ["SITLPOOL_INSTANCE"], os.environ["SITLPOOL_SERIAL0"], os.environ["SITLPOOL_SIM_OUT"], flush=True)
mode = sys.argv[-1]
if mode == "hold":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: (print("GOT SIGTERM", flush=True), sys.exit(42)))
    time.sleep(60)
sys.exit(int(mode))
"""


def test_run_substitutes_holds_and_returns_code(env, instances, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(RUN_PROBE)
    r = sitlpool(
        "run",
        "--",
        sys.executable,
        script,
        "-I",
        "{instance}",
        "--port={serial0}",
        "{serial1}",
        "{serial2}",
        "{rc_in}",
        "{sim_out}",
        "7",
        env=env,
    )
    n = instances[0]
    p = ports(n)
    assert r.returncode == 7
    assert f"ARGS -I {n} --port={p.serial0} {p.serial1} {p.serial2} {p.rc_in} {p.sim_out} 7" in r.stdout
    assert f"ENV {n} {p.serial0} {p.sim_out}" in r.stdout
    assert LeasePool.from_env().holder(n) is None, "released after the command"


def test_run_holds_lease_and_forwards_sigterm(env, instances, tmp_path, procs):
    script = tmp_path / "probe.py"
    script.write_text(RUN_PROBE)
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "run", "--owner", "my hold test", "--", sys.executable, script, "hold"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().startswith("ARGS")
    p.stdout.readline()
    h = LeasePool.from_env().holder(instances[0])
    assert h and h.pid == p.pid and h.owner == "my hold test"
    # a second run waits for the instance, then gets it
    waiter = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--instance",
            str(instances[0]),
            "--wait",
            "30",
            "--",
            sys.executable,
            "-c",
            "import os; print(os.environ['SITLPOOL_INSTANCE'])",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    assert waiter.poll() is None, "waits while the instance is held"
    p.send_signal(signal.SIGTERM)
    assert p.stdout.readline().strip() == "GOT SIGTERM"
    assert p.wait(10) == 42
    assert waiter.wait(30) == 0 and waiter.stdout.read().strip() == str(instances[0])
    r = sitlpool("run", "--instance", instances[0], "--", sys.executable, "-c", "pass", env=env)
    assert r.returncode == 0


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # an interactive shell does this
print(os.getpid(), flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_run_killed_stops_even_a_command_ignoring_sigterm(env, instances, procs, tmp_path):
    """``sitlpool run`` SIGKILLed: its guardian stops the command (SIGTERM, then SIGKILL after a
    grace, for one that ignores SIGTERM); until it is gone the instance stays leased (status
    names it) and nobody else is handed it; then the lease is free."""
    run = procs.popen(
        [sys.executable, "-m", "sitlpool", "run", "--owner", "stubborn shell", "--", sys.executable, "-c", STUBBORN],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    cmd_pid = int(run.stdout.readline())
    os.kill(run.pid, signal.SIGKILL)
    run.wait(10)
    try:
        h = LeasePool.from_env().holder(instances[0])
        assert h is not None and cmd_pid in h.kept_by and h.owner == "stubborn shell" and h.pid == run.pid
        assert f"pid {run.pid} exited and passed the lease on" in h.describe()
        wait_for(lambda: not procinfo.is_alive(cmd_pid), timeout=20, what="the guardian to stop the command")
        wait_for(lambda: LeasePool.from_env().holder(instances[0]) is None, what="the lease to go with the command")
    finally:
        run.stdin.close()
        if procinfo.is_alive(cmd_pid):
            os.kill(cmd_pid, signal.SIGKILL)
    r = sitlpool("run", "--instance", instances[0], "--", sys.executable, "-c", "pass", env=env)
    assert r.returncode == 0, r.stderr


def test_run_makes_the_builtin_vehicle_lease_aware(env, instances, procs, tmp_path):
    # the vehicle writes eeprom.bin and logs/ into its cwd: a temp dir, never the checkout
    p = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--",
            str(BIN / "sitlpool-sim"),
            "-I",
            "{instance}",
            "--model",
            "quad",
            "--speedup",
            "5",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    n = instances[0]
    g = Gcs(ports(n).serial0)
    assert g.heartbeat()
    assert LeasePool.from_env().holder(n).pid == p.pid
    g.close()
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0, "the vehicle's clean SIGTERM exit code"
    assert LeasePool.from_env().holder(n) is None


def test_kill_refused_on_held_instance_and_kills_a_stray(env, procs, lock_dir, instances, tmp_path):
    holder = hold_lease(procs, lock_dir, instances[1], "someone's session")
    r = sitlpool("kill", instances[1], env=env)
    assert r.returncode == 1 and f"instance {instances[1]} is leased to someone's session pid {holder.pid}" in r.stderr
    n = instances[2]
    stray = start_sim(procs, tmp_path / "stray", n)
    wait_for(lambda: listening(ports(n).serial0))
    r = sitlpool("kill", n, env=env)
    assert r.returncode == 0 and f"pid {stray.pid}" in r.stdout and "ports free" in r.stdout
    assert stray.wait(10) is not None
    r = sitlpool("reap", env=env)
    assert r.returncode == 0 and "nothing to reap" in r.stdout


def test_attach_exits_nonzero_when_the_vehicle_dies(env, procs, tmp_path, instances):
    n = instances[0]
    sim = start_sim(procs, tmp_path / "v", n, "--serial0", "tcp:0", "--speedup", 5)
    wait_for(lambda: listening(ports(n).serial1))
    a = procs.popen(
        [sys.executable, "-m", "sitlpool", "attach", str(n)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert a.stdout.readline().startswith(f"attached to {n} (pid {sim.pid})")
    assert "mode STABILIZE" in a.stdout.readline()
    os.killpg(sim.pid, signal.SIGKILL)
    assert a.wait(10) == 3
    assert "the watched SITL died" in a.stderr.read()


def test_attach_ctrl_c_detaches_cleanly(env, procs, tmp_path, instances):
    n = instances[0]
    sim = start_sim(procs, tmp_path / "v", n, "--serial0", "tcp:0", "--speedup", 5)
    wait_for(lambda: listening(ports(n).serial1))
    a = procs.popen(
        [sys.executable, "-m", "sitlpool", "attach", f"tcp:127.0.0.1:{ports(n).serial2}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert a.stdout.readline().startswith("attached to")
    a.send_signal(signal.SIGINT)
    assert a.wait(10) == 0
    assert sim.poll() is None


def _nothing_left(env, instances, data_dir):
    from conftest import processes_under

    assert LeasePool.from_env().status() == []
    assert processes_under(data_dir) == [] or all(procinfo.state(p) == "Z" for p in processes_under(data_dir))


def test_demo_flies_and_leaves_nothing(env, instances, data_dir):
    r = sitlpool("demo", "--speedup", 10, "--hold", 2, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for step in (
        "launching the built-in vehicle",
        f"instance {instances[0]}",
        "armed; taking off to 10 m",
        "landing",
        "landed and disarmed",
        "demo complete",
    ):
        assert step in r.stdout
    _nothing_left(env, instances, data_dir)


def test_demo_ctrl_c_leaves_nothing(env, instances, data_dir, procs):
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "demo", "--speedup", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stdout:
        if "ready" in line:
            break
    pid = int(line.split("SITL pid ")[1].split()[0])
    assert procinfo.is_alive(pid)
    p.send_signal(signal.SIGINT)
    assert p.wait(20) == 130
    assert "interrupted: cleaning up" in p.stdout.read()
    assert not procinfo.is_alive(pid)
    _nothing_left(env, instances, data_dir)


def _sleeping(pid: int) -> bool:
    """Whether the main thread of ``pid`` is in ``time.sleep`` (clock_nanosleep) right now."""
    import platform

    if platform.machine() != "x86_64":
        time.sleep(5)
        return True
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == "230"  # x86_64 clock_nanosleep
    except (OSError, IndexError):
        return False


def test_status_watch_and_sim_subcommand(env, procs, lock_dir, instances):
    hold_lease(procs, lock_dir, instances[0], "watched holder")
    w = procs.popen(
        [sys.executable, "-m", "sitlpool", "status", "--watch"],
        env=dict(env, COLUMNS="200", TERM="xterm"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Ctrl-C only once it is refreshing (sleeping between two tables): on a loaded machine
    # its start alone can take seconds, and a Ctrl-C before the first table shows nothing
    wait_for(lambda: _sleeping(w.pid), 60, what="status --watch to draw its first table")
    w.send_signal(signal.SIGINT)
    out, _ = w.communicate(10)
    assert w.returncode == 0 and "watched holder" in out
    r = sitlpool("sim", "-I", "3", env=env)
    assert r.returncode == 1 and "You must specify a vehicle model." in r.stdout


# ---- issue 12 item 10: bad arguments are one line and exit 1 or 2, never a traceback ---------


def _one_line_error(r, code: int, *words):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


BAD_ARGS = [
    (("attach", "garbage"), 2, "'garbage'", "tcp:HOST:PORT"),
    (("attach", "tcp:127.0.0.1:99999"), 2, "99999"),
    (("attach", "--", "-5"), 2, "instance -5 is negative"),
    (("attach", "١٠٠"), 2, "'١٠٠'"),
    (("attach", "99999"), 2, "past 65535"),
    (("serve", "--http", "99999"), 2, "99999", "1 to 65535"),
    (("serve", "--http", "-1"), 2, "-1", "1 to 65535"),
    (("serve", "--http", "x"), 2, "'x'"),
    (("run", "--owner", "   ", "--", "true"), 1, "needs an owner"),
    (("run", "--instance", "١٠٠", "--", "true"), 2, "'١٠٠'"),
    (("run", "--instance", "100_101", "--", "true"), 2, "'100_101'"),
    (("run", "--instance", "-3", "--", "true"), 2, "negative"),
    (("run", "--wait", "nan", "--", "true"), 2, "nan"),
    (("run", "--wait", "-1", "--", "true"), 2, "-1"),
    (("kill", "--", "-5"), 2, "negative"),
    (("kill", "١٠٠"), 2, "'١٠٠'"),
    (("attach", "3", "--timeout", "-1"), 2, "-1"),
    (("demo", "--speedup", "0"), 2, "speedup"),
    (("demo", "--speedup", "inf"), 2, "speedup"),
    (("demo", "--hold", "nan"), 2, "hold"),
    (("status", "--bogus"), 2, "--bogus"),
    (("bogus",), 2, "bogus"),
    ((), 2, "command"),
]


def test_bad_arguments_are_one_line_errors(env):
    for args, code, *words in BAD_ARGS:
        # the installed console script, as a person types it
        r = subprocess.run([str(BIN / "sitlpool"), *args], env=env, capture_output=True, text=True, timeout=60)
        _one_line_error(r, code, *words)


# ---- ./dev runs the venv's programs with the venv's bin on PATH, in the caller's cwd -------------


def test_dev_runs_venv_programs_that_call_venv_programs(env, instances, procs, tmp_path):
    # the README's example: `sitlpool run` itself starts `sitlpool-sim`, found on PATH
    clean_path = "/usr/local/bin:/usr/bin:/bin"
    p = procs.popen(
        [
            str(CHECKOUT / "dev"),
            "sitlpool",
            "run",
            "--",
            "sitlpool-sim",
            "-I",
            "{instance}",
            "--model",
            "quad",
            "--speedup",
            "5",
        ],
        env=dict(env, PATH=clean_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    n = instances[0]
    wait_for(lambda: listening(ports(n).serial0) or p.poll() is not None, 30, what="the vehicle to listen")
    assert p.poll() is None, p.stderr.read()
    g = Gcs(ports(n).serial0)
    assert g.heartbeat()
    g.close()
    assert (tmp_path / "eeprom.bin").exists(), "the vehicle runs in the caller's cwd, not in the checkout"
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0


# ---- issue 11 §2: `sitlpool run` and the demo on real ArduCopter ------------------------------------


def _copter_defaults(binary: Path) -> Path:
    return binary.parents[3] / "Tools" / "autotest" / "default_params" / "copter.parm"


def test_run_real_arducopter_under_a_lease(real_copter, env, instances, procs, tmp_path):
    # run from the checkout, the vehicle in a temp dir (--cwd): nothing may land in the checkout
    p = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--owner",
            "real copter run",
            "--cwd",
            tmp_path,
            "--",
            str(real_copter),
            "-I",
            "{instance}",
            "--model",
            "+",
            "--speedup",
            "5",
            "--defaults",
            str(_copter_defaults(real_copter)),
        ],
        env=env,
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    n = instances[0]
    g = Gcs(ports(n).serial0, timeout=30)
    hb = g.heartbeat(30)
    assert hb.autopilot == 3, "ArduPilot's own heartbeat"  # MAV_AUTOPILOT_ARDUPILOTMEGA
    h = LeasePool.from_env().holder(n)
    assert h.pid == p.pid and h.owner == "real copter run"
    # its ports are seen as held by arducopter, and its files are in the cwd it was given
    from sitlpool.ports import busy_ports, name_holders

    wait_for(lambda: listening(ports(n).serial1), 30, what="SERIAL1 after the first client")
    named = name_holders(busy_ports(ports(n)))
    assert any(b.holder and b.holder.name == "arducopter" for b in named), [b.describe() for b in named]
    wait_for(lambda: (tmp_path / "eeprom.bin").exists(), 10, what="eeprom.bin in the temp cwd")
    # booted, not waiting: it answers a stream request (real ArduCopter streams nothing unasked)
    g.m.mav.request_data_stream_send(g.m.target_system or 1, 1, 0, 4, 1)  # MAV_DATA_STREAM_ALL at 4 Hz
    assert g.recv("SYS_STATUS", 30) is not None
    g.close()
    p.send_signal(signal.SIGTERM)
    code = p.wait(20)
    assert code in (0, 143), (code, p.stderr.read())  # forwarded; 143 if SIGTERM came before SITL's setup finished
    assert LeasePool.from_env().holder(n) is None
    assert not listening(ports(n).serial0)


def test_demo_on_real_arducopter_leaves_nothing(real_copter, env, instances, data_dir):
    r = sitlpool(
        "demo",
        "--speedup",
        5,
        "--hold",
        2,
        env=dict(env, SITLPOOL_SITL_BINARY=str(real_copter)),
        cwd=CHECKOUT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for step in (
        f"launching {real_copter}",
        f"instance {instances[0]}",
        "armed; taking off to 10 m",
        "landed and disarmed",
        "demo complete",
    ):
        assert step in r.stdout, (step, r.stdout)
    _nothing_left(env, instances, data_dir)
