"""The link API other modules build on (send, listeners, require_writable) and the flight
module's checks, on the built-in vehicle."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from conftest import start_sim, wait_for
from sitlpool.errors import MavlinkError, ReadOnlyLink, SitlpoolError
from sitlpool.flight import check_finite, check_home, resolve_binary
from sitlpool.instances import ports


@pytest.fixture
def vehicle(procs, tmp_path, instances):
    n = instances[0]
    start_sim(procs, tmp_path / "v", n, "--speedup", 5)
    from sitlpool.mavlink.link import VehicleLink

    links = []

    def connect(**kw):
        link = VehicleLink(
            f"tcp:127.0.0.1:{ports(n).serial0 if not links else ports(n).serial1}", connect_timeout=10, **kw
        ).start()
        links.append(link)
        assert link.wait_heartbeat(10), "no HEARTBEAT"
        return link

    yield connect
    for link in links:
        link.close()


def test_listeners_see_every_message_and_a_failing_one_never_kills_the_link(vehicle, caplog):
    from sitlpool.mavlink.link import A

    link = vehicle()
    seen: list[str] = []

    def broken(msg):
        raise RuntimeError("listener bug")

    link.add_listener(broken)
    link.add_listener(lambda m: seen.append(m.get_type()))
    with caplog.at_level(logging.ERROR, logger="sitlpool.mavlink"):
        link.require_writable("ask for a parameter")
        link.send(A.MAVLink_param_request_read_message(link.vehicle.sysid or 1, 1, b"RTL_ALT", -1))
        wait_for(lambda: "PARAM_VALUE" in seen, 10, what="PARAM_VALUE through the listener")
    assert "listener bug" in caplog.text and link.state == "connected"
    link.remove_listener(broken)
    link.remove_listener(broken)  # twice: a no-op
    n = len(seen)
    wait_for(lambda: len(seen) > n + 5, 10, what="more messages after removing a listener")
    assert link.get_param("RTL_ALT") == 1500, "the link still answers"


def test_read_only_link_refuses_writes(vehicle):
    vehicle()  # SERIAL0's client first: the vehicle opens SERIAL1 after it
    ro = vehicle(read_only=True)
    with pytest.raises(ReadOnlyLink, match="read-only: 'upload a mission'"):
        ro.require_writable("upload a mission")
    with pytest.raises(ReadOnlyLink):
        ro.set_param("RTL_ALT", 2000)
    with pytest.raises(MavlinkError, match="not a finite number"):
        ro.set_param("RTL_ALT", float("nan"))


@pytest.mark.parametrize(
    "home, why",
    [
        ("1000,1000,0,0", "home latitude 1000 degrees is out of range"),
        ("-35,200,0,0", "home longitude 200 degrees is out of range"),
        ("-35,149,nan,0", "home altitude 'nan' is not a finite number"),
        ("-35,149,584", "needs 4 numbers"),
        ("a,b,c,d", "home latitude 'a' is not a number"),
    ],
)
def test_bad_homes(home, why):
    with pytest.raises(SitlpoolError, match=why):
        check_home(home)


def test_good_values_pass():
    assert check_home(" -35.363261, 149.165230 ,584,353") == "-35.363261,149.16523,584,353"
    assert check_home(None) is None
    assert check_finite("12.5", "x", 0, 100) == 12.5
    with pytest.raises(SitlpoolError, match="x 1e\\+308 m is out of range; use at most 1000 m"):
        check_finite(1e308, "x", None, 1000, "m")


def test_models_pick_the_binary_of_the_build(tmp_path):
    from sitlpool.config import load_settings

    bindir = tmp_path / "ardupilot" / "build" / "sitl" / "bin"
    bindir.mkdir(parents=True)
    for name in ("arducopter", "arduplane"):
        (bindir / name).write_text("#!/bin/sh\n")
        os.chmod(bindir / name, stat.S_IRWXU)
    s = load_settings(sitl_binary=bindir / "arducopter")
    assert resolve_binary(s, "quad") == bindir / "arducopter"
    assert resolve_binary(s, "plane") == bindir / "arduplane"
    with pytest.raises(SitlpoolError, match="model 'rover' is flown by ardurover.*no ardurover beside it"):
        resolve_binary(s, "rover")
    builtin = load_settings(sitl_binary="")
    assert resolve_binary(builtin, "hexa") is None
    with pytest.raises(SitlpoolError, match="built-in vehicle is a copter only .*model 'plane' is a plane"):
        resolve_binary(builtin, "plane")


@pytest.mark.parametrize(
    "bad",
    [
        "tcp:127.0.0.1:99999",
        "tcp:127.0.0.1:١٠٠",
        "tcp:127.0.0.1:5_760",
        "tcp:127.0.0.1:+5760",
        "garbage",
        "tcp::5760",
        "ftp:127.0.0.1:5760",
    ],
)
def test_endpoints_take_ascii_ports_only(bad):
    from sitlpool.errors import ConfigError
    from sitlpool.mavlink.endpoints import parse_endpoint

    with pytest.raises(ConfigError, match="is not tcp:HOST:PORT"):
        parse_endpoint(bad)
    assert parse_endpoint("tcp:127.0.0.1:5760") == ("tcp", "127.0.0.1", 5760)
