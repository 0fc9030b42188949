"""What runs on a Ray node imports neither the CLI, the MCP server nor the pytest plugin
(the layers contract checks the import graph; this checks what a node process loads), and
the plugin's ``Sitl`` is the flight layer's, re-exported."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray")


def test_a_node_process_loads_no_cli_server_or_pytest_plugin():
    code = (
        "import sys, sitlpool.fleet.node, sitlpool.fleet.fleet, sitlpool.fleet.remote\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['sitlpool', 'cli'], ['sitlpool', 'server'],"
        " ['sitlpool', 'pytest_plugin'], ['sitlpool', 'stdio_wire']))\n"
        "print(bad)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout


def test_the_plugins_sitl_is_the_flight_layers():
    from sitlpool import pytest_plugin, vehicle
    from sitlpool.fleet import node

    assert pytest_plugin.Sitl is vehicle.Sitl is node.Sitl
