"""A fleet's ``RemoteSitl`` has ``config`` as a local handle does (docs/pytest-plugin.md shows
``sitl.handle.config``, which under --sitl-ray is a RemoteSitl): what the node read back."""

import pytest

pytest.importorskip("ray")

from sitlpool.fleet.remote import RemoteSitl  # noqa: E402

INFO = {"session_id": "s1", "label": "sitl-1", "instance": 3, "node_id": "ab" * 28, "host": "127.0.0.1", "pid": None}


def test_remote_handle_config_is_what_the_node_sent():
    config = {"params": {"RTL_ALT": 1700.0}, "param_files": ["/home/me/frame.parm"], "not_applied": {}}
    h = RemoteSitl(None, {**INFO, "config": config})
    assert h.config == config
    assert h.config["params"]["RTL_ALT"] == 1700.0


def test_remote_handle_config_without_one_is_empty():
    assert RemoteSitl(None, dict(INFO)).config == {}
