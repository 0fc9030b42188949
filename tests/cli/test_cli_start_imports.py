"""`sitlpool status`, `sitlpool run` and `python -m sitlpool.leases status` start without
the heavy libraries they do not use: pymavlink, the MCP SDK, pydantic, Ray (and rich for --json)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("pymavlink", "mcp", "pydantic", "pydantic_settings", "ray", "anyio")

PROBE = """
import contextlib, io, json, sys
{call}
print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "call, also_absent",
    [
        (
            "from sitlpool.cli import main\nwith contextlib.redirect_stdout(io.StringIO()): main(['status', '--json'])",
            ("rich",),
        ),
        ("from sitlpool.cli import main\nwith contextlib.redirect_stdout(io.StringIO()): main(['status'])", ()),
        ("from sitlpool.cli import main\nmain(['run', '--', 'true'])", ("rich",)),
        (
            "from sitlpool.leases import main\nwith contextlib.redirect_stdout(io.StringIO()): main(['status'])",
            ("rich",),
        ),
        ("from sitlpool.config import load_settings\nload_settings()", ("rich",)),
    ],
)
def test_commands_start_without_heavy_imports(env, call, also_absent):
    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(call=call)], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stderr.strip().splitlines()[-1]))
    assert not loaded & set(HEAVY + also_absent), sorted(loaded & set(HEAVY + also_absent))
