"""The one patch sitlpool makes to Ray (``sitlpool.fleet._ray_loopback``): applied only
while a connection to a loopback cluster is made, put back afterwards, and a loud error
naming the Ray version when Ray no longer has the function it replaces."""

from __future__ import annotations

import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

import ray._private.services as services  # noqa: E402

from sitlpool.fleet import _ray_loopback  # noqa: E402
from sitlpool.fleet._ray_loopback import RayIncompatible, keep_loopback  # noqa: E402


def test_applied_inside_and_put_back_after():
    original = services.resolve_ip_for_localhost
    with keep_loopback("127.0.0.1:6379"):
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
        with keep_loopback("localhost:1"):  # nested users: the last one out restores
            assert _ray_loopback.active()
        assert _ray_loopback.active()
    assert services.resolve_ip_for_localhost is original


def test_a_routable_address_is_left_to_ray():
    original = services.resolve_ip_for_localhost
    with keep_loopback("10.0.0.5:6379"):
        assert services.resolve_ip_for_localhost is original


def test_put_back_even_when_the_connection_fails():
    original = services.resolve_ip_for_localhost
    with pytest.raises(ConnectionError), keep_loopback("127.0.0.1:1"):
        raise ConnectionError("nothing answers")
    assert services.resolve_ip_for_localhost is original


def test_a_ray_without_the_function_is_a_loud_error_naming_its_version(monkeypatch):
    monkeypatch.delattr(services, "resolve_ip_for_localhost")
    with pytest.raises(RayIncompatible, match=rf"Ray {ray.__version__} has no ray\._private\.services\.resolve_ip"):
        with keep_loopback("127.0.0.1:6379"):
            pass
    with keep_loopback("10.0.0.5:6379"):  # not needed there: nothing to complain about
        pass


def test_fleet_on_a_ray_without_the_function_says_so_instead_of_silently_not_patching(tmp_path):
    """Before: a ``hasattr`` guard skipped the patch and the user got Ray's connection
    failure (or a cluster reached at the wrong address) with no word of why."""
    code = (
        "import ray._private.services as s; del s.resolve_ip_for_localhost\n"
        "from sitlpool.fleet import Fleet\n"
        "from sitlpool.errors import SitlpoolError\n"
        "try:\n    Fleet('127.0.0.1:1')\nexcept SitlpoolError as e:\n    print(type(e).__name__, e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.stdout.startswith("RayIncompatible "), (r.stdout, r.stderr[-2000:])
    assert ray.__version__ in r.stdout
