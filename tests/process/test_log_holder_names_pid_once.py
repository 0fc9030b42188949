"""A kept log's record names the holder's pid once: "pid N" is added to the owner only when
the owner does not already say it ("sitlpool demo (pid 18691)", the default owner)."""

import os

import pytest

from sitlpool.config import load_settings
from sitlpool.process import ManagedManager
from sitlpool.process.managed import holder_of


@pytest.fixture
def manager(env):
    m = ManagedManager(load_settings())
    yield m
    m.close_all()


def test_holder_of_adds_the_pid_only_when_missing():
    assert holder_of("sitlpool demo (pid 18691)", 18691) == "sitlpool demo (pid 18691)"
    assert holder_of("sitlpool session f391b1 (hop)", 18691) == "sitlpool session f391b1 (hop) pid 18691"
    assert holder_of("sitlpool demo (pid 186910)", 18691) == "sitlpool demo (pid 186910) pid 18691"


@pytest.mark.parametrize("given", ["sitlpool demo (pid {pid})", None], ids=["owner-names-pid", "default-owner"])
def test_kept_logs_say_the_pid_once(manager, given):
    owner = given and given.format(pid=os.getpid())
    h = manager.start("holder", speedup=5, owner=owner, tlog=True)
    h.kill(wait=True)
    assert h.kept_logs, "its .tlog was kept"
    for r in h.kept_logs:
        assert r.holder.count(f"pid {os.getpid()}") == 1, r.holder
        assert r.holder.startswith(owner or "sitlpool holder pid")
