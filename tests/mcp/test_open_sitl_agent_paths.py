"""An agent names parameter files by name, beside the presets file: never an arbitrary path on
the server's machine (a parse error quotes the file's lines), unless SITLPOOL_ALLOW_PATHS=1."""

import os

import pytest

from mcp_client import ToolFailed, server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_an_agent_cannot_make_the_server_read_any_file(env, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:hunter2:secret line\n")
    data_dir = env["SITLPOOL_DATA_DIR"]
    os.makedirs(data_dir, exist_ok=True)
    async with server(env) as call:
        for given in (str(secret), "../../" + str(secret).lstrip("/"), "/etc/passwd"):
            with pytest.raises(ToolFailed, match="is not a file name in") as e:
                await call("open_sitl", param_files=[given], speedup=5)
            assert "hunter2" not in str(e.value) and "root:" not in str(e.value)
        assert (await call("list_sessions")) == []  # nothing was launched
