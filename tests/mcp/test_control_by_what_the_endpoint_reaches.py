"""Issue 20, item 1: control of another holder's vehicle is refused whatever the endpoint's
spelling of this machine. Each spelling below got a writable link before (only 127.0.0.1,
localhost and ::1 were recognised as this host)."""

import socket

import pytest

from conftest import hold_lease
from mcp_client import ToolFailed, server
from sitlpool.instances import ports

pytestmark = pytest.mark.anyio

SPELLINGS = ("127.0.0.2", "0.0.0.0", "LOCALHOST", "127.1", "[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "[::]")


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_every_spelling_of_this_host_is_refused_control(env, procs, lock_dir, instances):
    n = instances[0]
    hold_lease(procs, lock_dir, n, "someone else's flight")
    async with server(env) as call:
        for host in (*SPELLINGS, socket.gethostname()):  # this machine's own name too
            for port in (ports(n).serial1, ports(n).serial2, ports(n).serial0):
                with pytest.raises(ToolFailed, match=f"instance {n} is leased to .*someone else's flight"):
                    await call("attach_sitl", endpoint=f"tcp:{host}:{port}", control=True)
        # by instance too, and the same words
        with pytest.raises(ToolFailed, match=f"instance {n} is leased to .*someone else's flight"):
            await call("attach_sitl", instance=n, control=True)
