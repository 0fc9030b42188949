"""An MCP client for the tests: ``sitlpool serve`` over stdio through the real MCP SDK client."""

import json
import os
import sys
from contextlib import asynccontextmanager

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


class ToolFailed(Exception):
    pass


class Client:
    def __init__(self, session: ClientSession):
        self.session = session

    async def __call__(self, tool: str, **args):
        r = await self.session.call_tool(tool, args)
        text = " ".join(getattr(c, "text", "") for c in r.content)
        if r.is_error:
            raise ToolFailed(text)
        if r.structured_content is not None:
            sc = r.structured_content
            return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
        return json.loads(text)


@asynccontextmanager
async def server(env, errlog=None, args=()):
    params = StdioServerParameters(command=sys.executable, args=["-m", "sitlpool", "serve", *args], env=env)
    with open(os.devnull, "w") if errlog is None else errlog as log:
        async with stdio_client(params, errlog=log) as (r, w):
            async with ClientSession(r, w) as session:
                await session.initialize()
                yield Client(session)
