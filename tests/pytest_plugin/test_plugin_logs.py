"""The pytest plugin keeps a test's flight logs: a failing test's report names its logs (a
report section and JUnit properties) and they stay pinned in the log store; a passing test's
are kept unpinned; ``--sitl-keep-logs`` pins and names every test's. Run through pytester in
subprocesses, as a user's suite would, on the built-in vehicle."""

import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import listening, start_sim, wait_for
from sitlpool.instances import ports
from sitlpool.leases import LeasePool
from sitlpool.logs import LogStore

SECTION = "sitlpool logs (kept at teardown)"
NO_BIN = "the built-in vehicle wrote no DataFlash log after arming (its log writer is not wired in yet)"

# ``seen`` is set up before ``sitl`` and torn down after it: it sees ``kept_logs`` once the
# SITL stopped, as a user's fixture would; ``log_path`` is the live log while it flies
SUITE = """
import json, os
import pytest

@pytest.fixture
def seen(request):
    got = {}
    yield got
    s = got.get("sitl")
    with open(os.environ["RECORD_FILE"], "a") as f:
        f.write(json.dumps({
            "test": request.node.name,
            "cwd": str(s.handle.cwd),
            "live_before_arming": got.get("before"),
            "live": got.get("live"),
            "log_path_after_stop": str(s.log_path) if s.log_path else None,
            "kept": [r.as_dict() for r in s.kept_logs],
        }) + "\\n")

def hop(seen, sitl):
    seen["sitl"] = sitl
    seen["before"] = str(sitl.log_path) if sitl.log_path else None
    sitl.arm_and_takeoff(3)
    live = sitl.log_path
    seen["live"] = str(live) if live else None
    assert live is None or live.is_file()

def test_fails(seen, sitl):
    hop(seen, sitl)
    assert False, "deliberate"

def test_passes(seen, sitl):
    hop(seen, sitl)

def test_fails_unarmed(seen, sitl):
    seen["sitl"] = sitl
    assert False, "deliberate, never armed"
"""


@pytest.fixture
def suite(pytester, env, instances, tmp_path, monkeypatch):
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    monkeypatch.setenv("RECORD_FILE", str(tmp_path / "record.jsonl"))
    return pytester


def run(pytester, *args, timeout=240):
    return pytester.runpytest_subprocess("-p", "no:randomly", "--sitl-speedup", "10", *args, timeout=timeout)


def rows(tmp_path) -> dict[str, dict]:
    return {r["test"]: r for r in map(json.loads, (tmp_path / "record.jsonl").read_text().splitlines())}


def properties(junit, test: str) -> list[tuple[str, str]]:
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == test)
    return [(p.get("name"), p.get("value")) for p in case.iter("property")]


def sections(out: str) -> str:
    """The teardown sections the failure summary printed."""
    return "\n".join(re.findall(rf"-+ {re.escape(SECTION)} -+\n(.*?)(?=\n[_=-]{{3,}})", out, re.S))


def skip_without_logs(data_dir, vehicle_binary) -> None:
    """Skip on the built-in vehicle while it writes no log (real ArduCopter always does)."""
    if vehicle_binary is None and not any(data_dir.rglob("*.BIN")):
        pytest.skip(NO_BIN)


def test_a_failing_test_names_its_log_and_keeps_it_pinned(suite, instances, tmp_path, data_dir, vehicle_binary):
    junit = tmp_path / "junit.xml"
    suite.makepyfile(test_three=SUITE)
    binary = [f"--sitl-binary={vehicle_binary}"] if vehicle_binary else []  # one argument: not a rootdir
    r = run(suite, *binary, "--sitl-pool", f"{instances[0]}-{instances[2]}", f"--junitxml={junit}")
    skip_without_logs(data_dir, vehicle_binary)
    got = rows(tmp_path)
    r.assert_outcomes(failed=2, passed=1)
    out = r.stdout.str()
    store = LogStore(data_dir)

    fails, passes, unarmed = got["test_fails"], got["test_passes"], got["test_fails_unarmed"]
    # the live log: none before arming, the instance's logs/NNNNNNNN.BIN while it flies, none once stopped
    assert fails["live_before_arming"] is None
    assert re.fullmatch(re.escape(fails["cwd"]) + r"/logs/\d{8}\.BIN", fails["live"])
    assert fails["log_path_after_stop"] is None
    assert f"log being written: {fails['live']}" in out  # the failed call's section

    # kept by the store when the SITL stopped; pinned before the user's later teardown ran
    (kept,) = fails["kept"]
    assert kept["pinned"] and kept["instance"] in instances
    assert store.get(kept["id"]).pinned and store.path(kept["id"]).is_file()
    assert f"test_fails-0 (instance {kept['instance']}): log {kept['id']} {kept['path']} (pinned)" in sections(out)
    assert properties(junit, "test_fails") == [("sitlpool_log_id", kept["id"]), ("sitlpool_log_path", kept["path"])]

    # a passing test's log: kept, not pinned, not in any report
    (ok,) = passes["kept"]
    assert not ok["pinned"] and not store.get(ok["id"]).pinned and store.path(ok["id"]).is_file()
    assert ok["id"] not in out and properties(junit, "test_passes") == []

    # a failing test whose vehicle never armed: no log, and the report says so
    assert unarmed["kept"] == [] and properties(junit, "test_fails_unarmed") == []
    assert "test_fails_unarmed-0 (instance" in sections(out) and "no log kept (it wrote none)" in sections(out)
    assert {x.id for x in store.list()} == {kept["id"], ok["id"]}
    assert LeasePool.from_env().status() == []


def test_keep_logs_option_pins_every_test_s_logs_under_xdist(suite, instances, tmp_path, data_dir):
    """On the built-in vehicle only: what is checked is the plugin's (xdist workers, the option,
    the reports); the real-ArduCopter logs are the previous test's."""
    junit = tmp_path / "junit.xml"
    suite.makepyfile(test_two=SUITE.split("def test_fails_unarmed")[0])
    pool = f"--sitl-pool={instances[0]}-{instances[1]}"
    r = run(suite, "-n", "1", "--sitl-keep-logs", pool, f"--junitxml={junit}")
    got = rows(tmp_path)
    r.assert_outcomes(failed=1, passed=1)
    out = r.stdout.str()
    store = LogStore(data_dir)
    for test in ("test_fails", "test_passes"):
        (kept,) = got[test]["kept"]
        assert kept["pinned"] and store.get(kept["id"]).pinned, test
        assert properties(junit, test) == [("sitlpool_log_id", kept["id"]), ("sitlpool_log_path", kept["path"])]
    # the failure summary (on the controller: the teardown report came from the worker) names it
    fail = got["test_fails"]["kept"][0]
    assert f"log {fail['id']} {fail['path']} (pinned)" in sections(out)


def test_keep_logs_ini_key_and_bad_budget(pytester, env, instances, tmp_path, monkeypatch, data_dir):
    """``sitl_keep_logs = true`` in the ini file reads as the option; without SITLs nothing is kept
    or pinned, and the store is never opened (a bad budget does not matter to a suite without logs)."""
    monkeypatch.setenv("SITLPOOL_LOG_BUDGET_MB", "lots")
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\nsitl_keep_logs = true\n")
    pytester.makepyfile(
        test_ini="""
def test_it(sitl_lease, pytestconfig):
    assert pytestconfig.getini("sitl_keep_logs") is True
    assert False, "deliberate"
"""
    )
    r = pytester.runpytest_subprocess("-p", "no:randomly", "--sitl-pool", str(instances[0]))
    r.assert_outcomes(failed=1)
    assert SECTION not in r.stdout.str() and not (data_dir / "logs").exists()


def test_an_attached_sitl_s_logs_are_never_moved(suite, procs, tmp_path, instances, data_dir):
    """A failing test on an attached SITL (not ours): its report says its logs stay where it
    writes them, and the store keeps nothing of it."""
    n = instances[3]
    sim = start_sim(procs, tmp_path / "v", n, "--serial0", "tcp:0", "--speedup", 5)
    wait_for(lambda: listening(ports(n).serial1))
    suite.makepyfile(test_att="def test_watch(attached_sitl):\n    assert False, 'deliberate'\n")
    r = run(suite, "--sitl-attach", str(n), "--sitl-keep-logs")
    r.assert_outcomes(failed=1)
    assert f"attach-test_watch (instance {n}): attached, not ours: its logs stay where it writes them" in sections(
        r.stdout.str()
    )
    assert LogStore(data_dir).list() == [] and sim.poll() is None
