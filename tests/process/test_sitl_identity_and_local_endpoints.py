"""What is a SITL and what is this machine, decided on what things are, never on how they
are spelt: a process is a SITL by its executable and whole command line (not a substring of
it, not a process name anyone may set), and an endpoint is one of our instances by what its
host resolves to (any spelling of this host) and whose port it is."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from conftest import listening, start_sim, wait_for
from sitlpool.config import load_settings
from sitlpool.instances import ports
from sitlpool.process import UnmanagedSitl, is_sitl_process, kill_instance
from sitlpool.process.binaries import is_sitl_command
from sitlpool.process.unmanaged import is_this_host, local_instance_of


@pytest.fixture
def settings(env):
    return load_settings()


LISTENER = """
import ctypes, socket, sys, time
if sys.argv[2] == "rename":  # a process name anyone may set: prctl(PR_SET_NAME)
    ctypes.CDLL(None).prctl(15, b"arducopter", 0, 0, 0)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("disguise", ["argv", "rename"])
def test_kill_instance_spares_a_listener_that_only_looks_like_a_sitl(procs, settings, instances, disguise):
    """A plain listener on SERIAL2 whose command line holds `sitlpool.sim` (or whose process
    name says arducopter) is not a SITL: reported, never signalled."""
    n = instances[0]
    p = procs.python(LISTENER, ports(n).serial2, disguise, "sitlpool.sim", stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("listening")
    assert not is_sitl_process(p.pid)
    report = kill_instance(n, settings=settings)
    time.sleep(0.2)
    assert p.poll() is None, f"kill_instance killed a listener that is not a SITL: {report.describe()}"
    assert report.signalled == [] and not report.killed, report
    assert any("is not a SITL process" in s for s in report.left_alone), report


def test_a_real_builtin_vehicle_is_still_a_sitl(procs, settings, instances, tmp_path):
    n = instances[1]
    sim = start_sim(procs, tmp_path / "sim", n)
    wait_for(lambda: listening(ports(n).serial0), what="the SITL to listen")
    assert is_sitl_process(sim.pid)
    report = kill_instance(n, settings=settings)
    assert sim.wait(10) is not None and report.signalled == [sim.pid], report


@pytest.mark.parametrize(
    "exe,argv,sitl",
    [
        ("/opt/ap/build/sitl/bin/arducopter", ["/opt/ap/build/sitl/bin/arducopter", "-I", "3"], True),
        (None, ["/opt/ap/arduplane", "-I", "3"], True),  # another user's: exe unreadable
        ("/usr/bin/python3.11", ["python3", "-m", "sitlpool.sim", "-I", "3"], True),
        ("/usr/bin/python3.11", ["/venv/bin/python", "/venv/bin/sitlpool-sim", "-I", "3"], True),
        ("/usr/bin/python3.11", ["python3", "-c", "listen()", "sitlpool.sim"], False),
        ("/usr/bin/python3.11", ["python3", "-c", "import sitlpool.sim"], False),
        ("/usr/bin/python3.11", ["python3", "/tmp/x.py", "-m", "sitlpool.sim"], False),
        ("/usr/bin/nc", ["nc", "-l", "5763", "sitlpool.sim", "arducopter"], False),
        ("/usr/bin/python3.11", ["arducopter", "-I", "3"], False),  # exec -a: argv[0] lies, exe does not
        ("/usr/bin/sitlpool.sim", ["sitlpool.sim"], False),
        (None, [], False),
    ],
)
def test_a_sitl_is_known_by_its_executable_and_whole_command_line(exe, argv, sitl):
    assert is_sitl_command(exe, argv) is sitl


# ---- this host, in any spelling ----------------------------------------------------------

SPELLINGS = ["127.0.0.1", "127.0.0.2", "0.0.0.0", "LOCALHOST", "localhost", "127.1", "2130706433", "::1", "::"]
SPELLINGS += ["::ffff:127.0.0.1"]


def _resolves(name: str) -> bool:
    try:
        return bool(socket.getaddrinfo(name, None))
    except OSError:
        return False


if _resolves(socket.gethostname()):
    SPELLINGS.append(socket.gethostname())  # this machine's own name


@pytest.mark.parametrize("host", SPELLINGS)
def test_every_spelling_of_this_host_reaches_our_instance(host):
    n = 44
    assert is_this_host(host)
    assert local_instance_of(f"tcp:{host}:{ports(n).serial2}") == n
    assert local_instance_of(f"tcp:[{host}]:{ports(n).serial1}" if ":" in host else f"{host}:{ports(n).serial1}") == n
    h = UnmanagedSitl(None, "x", endpoint=f"tcp:{host}:{ports(n).serial2}")
    assert h.instance == n and h.on_localhost


def test_an_address_of_this_hosts_interfaces_is_this_host():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this picks the address of the default route
        mine = s.getsockname()[0]
    except OSError:
        pytest.skip("no IPv4 route on this machine")
    finally:
        s.close()
    assert is_this_host(mine) and local_instance_of(f"tcp:{mine}:{ports(44).serial0}") == 44


@pytest.mark.parametrize("host", ["192.0.2.77", "198.51.100.1", "2001:db8::1", "no-such-host.invalid"])
def test_other_hosts_are_not_ours(host):
    assert not is_this_host(host)
    endpoint = f"tcp:[{host}]:{ports(44).serial2}" if ":" in host else f"tcp:{host}:{ports(44).serial2}"
    assert local_instance_of(endpoint) is None


def test_a_port_that_is_no_instances_is_none():
    assert local_instance_of("tcp:127.0.0.2:22") is None
    assert local_instance_of(f"tcp:127.0.0.2:{ports(44).serial0 + 1}") is None  # 5761+10n: not a serial port


def test_sitl_identity_helpers_need_no_pymavlink():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sitlpool.process; print('pymavlink' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout.strip() == "False", "importing sitlpool.process (status, reap, kill) loads pymavlink"
