"""Issue 19 moved the MCP server into its own package, tools grouped by subject: the tools an
agent sees are the same as before, name by name: arguments (input schema), descriptions and
annotations. ``tools_before_the_server_package.json`` is the tools/list of the server as it
was (commit 7cbe0bf), recorded once; only the order of the list changed. Tools may since have
gained optional arguments (open_sitl's preset, wind, pace; upload_mission's file forms): every
argument an agent could pass before is still taken, with the same type, and nothing new is required."""

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
        new, old = now[name], tool
        assert new.get("annotations") == old.get("annotations"), name
        assert new["description"][:12] == old["description"][:12], name  # the same tool, maybe more said
        olds, news = old["inputSchema"], new["inputSchema"]
        assert set(news.get("required", [])) <= set(olds.get("required", [])), (name, "a new required argument")
        for arg, schema in olds.get("properties", {}).items():
            assert arg in news.get("properties", {}), (name, arg)
            assert accepts(news["properties"][arg], schema), (name, arg, news["properties"][arg], schema)


def types(schema: dict) -> list:
    """The JSON types a property takes (anyOf flattened), without title/default/description."""
    alts = schema.get("anyOf", [schema])
    return sorted(
        json.dumps({k: v for k, v in a.items() if k not in ("title", "default", "description")}, sort_keys=True)
        for a in alts
    )


def accepts(new: dict, old: dict) -> bool:
    """``new`` takes every value ``old`` took: the same types, or those plus null."""
    return set(types(old)) <= set(types(new))
