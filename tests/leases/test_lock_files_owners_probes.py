"""Issue 12 (hardening) for leases, ports and settings: a bad lock file blocks no one,
owners are bounded and refused when blank, numbers are parsed strictly, the port probe
sees every kind of holder, and an unleased SITL's instance reads as "ports taken"."""

import json
import os
import socket
import subprocess
import sys

import pytest
from test_lease_pool import public_tmp, run_as_nobody  # noqa: F401 - public_tmp is a fixture

from conftest import hold_lease, listening, start_sim, wait_for
from sitlpool.config import parse_pool
from sitlpool.errors import ConfigError, InstanceError, LockDirError, NoFreeInstance, OwnerError, PortsBusy
from sitlpool.instances import parse_instance, parse_port, ports, strict_int
from sitlpool.leases import MAX_OWNER, LeasePool, lock_path, parse_record, validate_owner

# ---- item 7: one unusable lock file blocks no first-free acquisition ------------------------


def _make_bad(kind: str, path, tmp_path):
    if kind == "symlink":
        target = tmp_path / "elsewhere"
        target.write_text("")
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    return {"symlink": "symbolic link", "fifo": "not a regular file", "directory": "directory"}[kind]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_bad_lock_file_is_skipped_by_a_pool_scan(kind, lock_dir, instances, tmp_path):
    lock_dir.mkdir(parents=True)
    pool = LeasePool(lock_dir, instances[:2], check=False)
    words = _make_bad(kind, lock_path(lock_dir, instances[0]), tmp_path)
    with pool.acquire("me") as lease:
        assert lease.instance == instances[1]
        # nothing free: the error says which lock file could not be used, and why
        with pytest.raises(NoFreeInstance) as e:
            pool.acquire("me too")
        msg = str(e.value)
        assert "1 leased" in msg and "1 with an unusable lock file" in msg and words in msg
        assert str(lock_path(lock_dir, instances[0])) in msg
    # asked for by number, the bad file is still refused
    with pytest.raises(LockDirError, match=words):
        pool.acquire("me", instance=instances[0])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_unreadable_lock_file_is_skipped_by_a_pool_scan(public_tmp, instances):  # noqa: F811
    d = public_tmp / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    bad = lock_path(d, instances[0])
    bad.write_text("")
    os.chmod(bad, 0o000)  # root's file that nobody else may open at all

    def scan():
        pool = LeasePool(d, instances[:2], check=False)
        got = pool.acquire("nobody's scan").instance
        try:
            pool.acquire("nobody's second scan")
        except NoFreeInstance as e:
            nofree = str(e)
        try:
            pool.acquire("by number", instance=instances[0])
        except LockDirError as e:
            bynumber = str(e)
        return got, nofree, bynumber

    out = run_as_nobody(scan)
    assert isinstance(out, tuple), out
    got, nofree, bynumber = out
    assert got == instances[1]
    assert "unusable lock file" in nofree and str(bad) in nofree and "Permission denied" in nofree
    assert str(bad) in bynumber and "Permission denied" in bynumber


# ---- item 11: owners bounded, blank refused, records read robustly --------------------------


def test_blank_and_huge_owners_are_refused_at_the_lease_layer(lock_dir, instances):
    pool = LeasePool(lock_dir, instances[:1], check=False)
    for blank in ("", "   ", "\t\n"):
        with pytest.raises(OwnerError, match="needs an owner"):
            pool.acquire(blank)
        with pytest.raises(OwnerError, match="needs an owner"):
            validate_owner(blank)
    huge = "x" * (10 << 20)
    with pytest.raises(OwnerError, match="10485760 characters") as e:
        pool.acquire(huge)
    assert len(str(e.value)) < 300
    with pytest.raises(OwnerError, match="control character"):
        pool.acquire("evil\x1b[2Jowner")
    # nothing was written or left locked
    path = lock_path(lock_dir, instances[0])
    assert not path.exists() or path.stat().st_size < 100
    assert pool.status() == []
    # the sessions layer checks a user's label before adding its own text around it
    assert validate_owner("  my   test\t(alice) ") == "my test (alice)"
    assert validate_owner("y" * MAX_OWNER) == "y" * MAX_OWNER
    with pytest.raises(OwnerError, match=f"at most {MAX_OWNER}"):
        validate_owner("y" * (MAX_OWNER + 1), what="label")
    with pool.acquire("ok") as lease:
        with pytest.raises(OwnerError):
            lease.set_owner("")
        assert parse_record(lease.path.read_bytes())[0] == "ok"


HUGE_RECORD_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, ("L" * (10 << 20) + f"\\t{os.getpid()}\\t{time.time():.3f}\\n").encode())
print("held", flush=True)
time.sleep(3600)
"""


def test_a_huge_record_written_by_another_tool_reads_cleanly(env, lock_dir, instances, procs):
    lock_dir.mkdir(parents=True)
    path = lock_path(lock_dir, instances[0])
    p = procs.python(HUGE_RECORD_HOLDER, path, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    [h] = LeasePool(lock_dir, instances, check=False).status()
    assert h.pid == p.pid and h.record_pid == p.pid and h.record_matches
    assert h.owner.startswith("LLLL") and len(h.owner) <= 2 * MAX_OWNER + 1 and h.owner.endswith("…")
    assert h.age is not None and h.age < 60
    r = subprocess.run([sys.executable, "-m", "sitlpool", "status", "--json"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    [held] = json.loads(r.stdout)["held"]
    assert held["pid"] == p.pid and held["owner"] == h.owner and len(r.stdout) < 20000


def test_garbage_records_parse_to_bounded_printable_owners():
    owner, pid, since = parse_record(b"\x1b[31mred\x07\t12\t1.5\n")
    assert owner.isprintable() and "\x1b" not in owner and pid == 12 and since == 1.5
    owner, pid, _ = parse_record(b"z" * 5000)
    assert len(owner) <= 2 * MAX_OWNER + 1 and pid is None


# ---- item 11: numbers are ASCII digits only; pool suggestions are valid -----------------------


@pytest.mark.parametrize("text", ["١٠٠", "100_101", "+5", " 5", "5 ", "0x10", "", "-", "1e3", "５"])
def test_strict_int_refuses_what_int_accepts(text):
    assert strict_int(text) is None


def test_strict_parsers():
    assert strict_int("42") == 42 and strict_int("-5") == -5 and strict_int("007") == 7
    assert parse_instance("40") == 40
    with pytest.raises(InstanceError, match="'١٠٠' is not an instance number"):
        parse_instance("١٠٠")
    with pytest.raises(InstanceError, match="instance -5 is negative"):
        parse_instance("-5")
    with pytest.raises(InstanceError, match="past 65535"):
        parse_instance("99999")
    assert parse_port("5760") == 5760
    for bad, words in (("99999", "past 65535"), ("0", "1 to 65535"), ("-1", "1 to 65535"), ("5_760", "not a port")):
        with pytest.raises(ConfigError, match=words):
            parse_port(bad)


@pytest.mark.parametrize(
    "text, words",
    [
        ("١٠٠", "not a number"),
        ("100_101", "not a number"),
        ("100-١٠٥", "not a number"),
        ("100--105", "not a number"),
        ("-5", "not a number"),
        ("100-", "not a number"),
        ("+100", "not a number"),
    ],
)
def test_pool_refuses_non_ascii_and_odd_numbers(text, words):
    with pytest.raises(ConfigError) as e:
        parse_pool(text)
    assert words in str(e.value) and "write it as -" not in str(e.value)


def test_backwards_range_suggests_a_valid_fix():
    with pytest.raises(ConfigError) as e:
        parse_pool("105-100")
    fix = str(e.value).split("write it as ")[1].split()[0].rstrip(";,")
    assert parse_pool(fix) == tuple(range(100, 106))


# ---- item 13: an unleased SITL's instance is "ports taken", not free ------------------------------


def test_availability_names_ports_taken(lock_dir, instances, procs, tmp_path):
    pool = LeasePool(lock_dir, instances, check=False)
    hold_lease(procs, lock_dir, instances[0], "holder")
    n = instances[2]
    sim = start_sim(procs, tmp_path / "foreign", n, "--serial0", "tcp:0")
    wait_for(lambda: listening(ports(n).serial1))
    av = pool.availability()
    assert av.free == [i for i in instances if i not in (instances[0], n)]
    assert list(av.ports_taken) == [n]
    doc = av.as_dict()
    [taken] = doc["ports_taken"]
    assert taken["instance"] == n and any(f"pid {sim.pid}" in b for b in taken["ports"]), taken


# ---- the port probe: every holder of each of the six ports, never binding ------------------------


SIX = ("serial0", "serial1", "serial2", "rc_in", "sim_out", "sim_in")


def _hold(kind: str, family: int, addr: str, port: int, v6only: bool = True) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))  # v6only: not reachable over IPv4
    s.bind((addr, port))
    if kind == "tcp":
        s.listen()
    return s


@pytest.mark.parametrize(
    "family, addr, v6only",
    [
        (socket.AF_INET, "0.0.0.0", True),
        (socket.AF_INET, "127.0.0.1", True),
        (socket.AF_INET6, "::", True),
        (socket.AF_INET6, "::1", True),
        (socket.AF_INET6, "::", False),
    ],
)
def test_probe_sees_each_port_bound_any_way(family, addr, v6only, lock_dir, instances):
    from sitlpool.ports import probe

    pool = LeasePool(lock_dir, instances[:2])  # the default check: the probe
    p = ports(instances[0])
    for name in SIX:
        port = getattr(p, name)
        proto = "tcp" if name.startswith("serial") else "udp"
        s = _hold(proto, family, addr, port, v6only)
        try:
            why = probe(p)
            assert why and f"{proto}:{port} (" in why and f"pid {os.getpid()}" in why, (name, why)
            with pytest.raises(PortsBusy, match=f"{proto}:{port} "):
                pool.acquire("me", instance=instances[0])
            with pool.acquire("me") as lease:  # a pool scan skips it
                assert lease.instance == instances[1]
        finally:
            s.close()
    assert probe(p) is None
    with pool.acquire("me") as lease:
        assert lease.instance == instances[0]


def test_probe_ignores_neighbours_and_clients(instances):
    """Ports next to an instance's, and connected (non-listening) TCP sockets, are not its ports."""
    from sitlpool.ports import probe

    p = ports(instances[0])
    near = [
        _hold("tcp", socket.AF_INET, "127.0.0.1", p.serial0 + 1),
        _hold("udp", socket.AF_INET, "127.0.0.1", p.rc_in + 1),
        _hold("tcp", socket.AF_INET, "127.0.0.1", p.serial2 + 1),
    ]
    # a client whose *local* port is serial1 (bound before connect) is not a listener there
    srv = _hold("tcp", socket.AF_INET, "127.0.0.1", ports(instances[1]).serial0)
    c = socket.socket()
    c.bind(("127.0.0.1", p.serial1))
    c.connect(("127.0.0.1", ports(instances[1]).serial0))
    try:
        assert probe(p) is None
    finally:
        for s in (*near, srv, c):
            s.close()


def test_kernel_filtered_dump_sees_any_address_and_only_the_ports_asked(instances):
    """``bound`` (status, discovery) asks the kernel for the wanted ports only, and sees a
    socket bound to any local address, not only the wildcard and loopback ones."""
    from sitlpool.ports import bound, port_filter, read_sockets

    p = ports(instances[0])
    s = _hold("tcp", socket.AF_INET, "127.0.0.2", p.serial2)  # another loopback address
    u = _hold("udp", socket.AF_INET6, "::1", p.sim_in)
    other = _hold("tcp", socket.AF_INET, "127.0.0.1", p.serial0 + 1)
    try:
        got = bound({("tcp", p.serial2), ("udp", p.sim_in), ("tcp", p.serial0)})
        assert [(b.proto, b.port) for b in got] == [("tcp", p.serial2), ("udp", p.sim_in)]
        filtered = read_sockets(("tcp",), ports=[p.serial0, p.serial2])
        assert {x.local_port for x in filtered} <= set(range(p.serial0, p.serial2 + 1))
        assert any(x.local_port == p.serial2 for x in filtered)
        # many ports: at most MAX_RANGES ranges, every wanted port inside one of them
        many = [ports(n).serial0 for n in instances] + [ports(n).rc_in for n in instances]
        assert len(port_filter(many)) <= 8 * 20
    finally:
        for x in (s, u, other):
            x.close()


def test_lookups_read_one_by_one_find_the_same(instances):
    """Without recvmmsg (another libc), replies are read one at a time: same answers."""
    import importlib

    P = importlib.import_module("sitlpool.ports")  # the module (sitlpool.ports the name is a function)
    D = importlib.import_module("sitlpool.ports._sockdiag")  # the netlink machinery
    p = ports(instances[0])
    plain = D._Netlink()
    plain._mmsg = False
    s = _hold("udp", socket.AF_INET, "0.0.0.0", p.sim_out)
    try:
        keys = P._lookup_keys(P._want(p))
        found = plain.lookup(D._Lookups(keys))
        assert [(x.proto, x.local_port) for x in found] == [("udp", p.sim_out)]
        assert [(x.proto, x.local_port) for x in P._NL.lookup(P._Lookups(keys))] == [("udp", p.sim_out)]
    finally:
        s.close()
    assert plain.lookup(P._Lookups(keys)) == []
