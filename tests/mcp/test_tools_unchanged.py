"""Issue 19 moved the MCP server into its own package, tools grouped by subject: the tools an
agent sees are the same as before, name by name: arguments (input schema), descriptions and
annotations. ``tools_before_the_server_package.json`` is the tools/list of the server as it
was (commit 7cbe0bf), recorded once; only the order of the list changed."""

import json
from pathlib import Path

from test_stdio_wire import by_id, init, talk
from test_stdio_wire_hostile import INITED

BEFORE = json.loads((Path(__file__).parent / "tools_before_the_server_package.json").read_text())


def test_every_tool_is_as_it_was(procs, env):
    resp, _ = talk(procs, env, init(1), INITED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, expect=(1, 2))
    now = {t["name"]: t for t in by_id(resp, 2)[0]["result"]["tools"]}
    before = {t["name"]: t for t in BEFORE}
    assert set(before) <= set(now), sorted(set(before) - set(now))  # tools added since are checked by their own tests
    for name, tool in before.items():
        assert now[name] == tool, name
