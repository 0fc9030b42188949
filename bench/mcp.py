"""MCP server benchmarks: start to initialize and to tools/list (beside mcardupilot's), open_sitl
to ready, snapshot round trip, ten servers flying at once."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

# this file is named like the SDK: keep its folder off the path while importing the SDK
_here = str(Path(__file__).resolve().parent)
sys.path = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

sys.path.insert(0, _here)
from _util import report, stats  # noqa: E402

BASE = 2400
MCARDUPILOT_REFERENCE_S = 2.65  # start -> tools/list answered, measured side by side in issue 19


async def call(session, tool, **args):
    r = await session.call_tool(tool, args)
    if r.is_error:
        raise RuntimeError(" ".join(getattr(c, "text", "") for c in r.content))
    if r.structured_content is not None:
        return r.structured_content
    return json.loads(" ".join(getattr(c, "text", "") for c in r.content))


def env(tmp: Path) -> dict:
    return dict(os.environ, SITLPOOL_DATA_DIR=str(tmp), SITLPOOL_POOL=f"{BASE}-{BASE + 19}")


async def hop(e: dict, speedup: float, out: dict) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "sitlpool", "serve"], env=e)
    with open(os.devnull, "w") as devnull:
        t = time.monotonic()
        async with stdio_client(params, errlog=devnull) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                out.setdefault("init", []).append(time.monotonic() - t)
                await s.list_tools()  # answered once the MCP SDK is loaded (initialize is answered before)
                out.setdefault("tools", []).append(time.monotonic() - t)
                t = time.monotonic()
                sess = await call(s, "open_sitl", speedup=speedup)
                out.setdefault("open", []).append(time.monotonic() - t)
                sid = sess["session_id"]
                for _ in range(50):
                    t = time.monotonic()
                    await call(s, "snapshot", session_id=sid)
                    out.setdefault("snap", []).append(time.monotonic() - t)
                # an agent's natural order: GUIDED at once, arm retried while refused
                await call(s, "set_mode", session_id=sid, mode="GUIDED")
                deadline = time.monotonic() + 120
                while True:
                    try:
                        await call(s, "arm", session_id=sid)
                        break
                    except RuntimeError:
                        if time.monotonic() > deadline:
                            raise
                        await anyio.sleep(0.5)
                await call(s, "takeoff", session_id=sid, altitude_m=10)
                w = await call(s, "wait_until", session_id=sid, condition="altitude_above", value=9.5, timeout_s=55)
                assert w["result"] == "met", w
                await call(s, "land", session_id=sid)
                w = await call(s, "wait_until", session_id=sid, condition="disarmed", timeout_s=55)
                assert w["result"] == "met", w
                await call(s, "close_sitl", session_id=sid)
                out.setdefault("hops", []).append(1)


async def connect_modern(e: dict) -> float:
    from mcp import Client

    params = StdioServerParameters(command=sys.executable, args=["-m", "sitlpool", "serve"], env=e)
    with open(os.devnull, "w") as devnull:
        t = time.monotonic()
        async with Client(stdio_client(params, errlog=devnull)):
            return time.monotonic() - t


async def start_to_tools(command: list[str], e: dict) -> float:
    """Process start to ``tools/list`` answered, through the SDK's client (what an agent waits for)."""
    params = StdioServerParameters(command=command[0], args=command[1:], env=e)
    with open(os.devnull, "w") as devnull:
        t = time.monotonic()
        async with stdio_client(params, errlog=devnull) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                await s.list_tools()
                return time.monotonic() - t


def mcardupilot_command() -> list[str] | None:
    """mcardupilot's MCP server command, if it is installed here (``MCARDUPILOT_CMD`` overrides)."""
    given = os.environ.get("MCARDUPILOT_CMD")
    if given:
        return given.split()
    ok = subprocess.run([sys.executable, "-c", "import mcardupilot"], capture_output=True).returncode == 0
    return [sys.executable, "-m", "mcardupilot"] if ok else None


async def bench_tools_list(tmp: Path) -> None:
    e = env(tmp)
    cold = []
    for i in range(3):  # nothing cached (a new install, an edited tool): tools/list waits for the SDK
        cold.append(
            await start_to_tools(
                [sys.executable, "-m", "sitlpool", "serve"], dict(e, XDG_CACHE_HOME=str(tmp / f"c{i}"))
            )
        )
    warm_env = dict(e, XDG_CACHE_HOME=str(tmp / "cache"))
    await start_to_tools([sys.executable, "-m", "sitlpool", "serve"], warm_env)  # the first start caches the tool list
    ours, peer = [], []
    peer_cmd = mcardupilot_command()
    for _ in range(5):  # alternated, so both see the same machine load
        ours.append(await start_to_tools([sys.executable, "-m", "sitlpool", "serve"], warm_env))
        if peer_cmd:
            peer.append(await start_to_tools(peer_cmd, e))
    ref = statistics.median(peer) if peer else MCARDUPILOT_REFERENCE_S
    report(
        "process start to tools/list answered (tool list cached)",
        stats(ours),
        f"≤ {0.3 * ref:.2f} s (0.3× mcardupilot)",
    )
    report("  the same, nothing cached (a first start: the SDK answers)", stats(cold))
    label = "  mcardupilot, same run" if peer else "  mcardupilot (not installed here: issue 19's reference figure)"
    report(label, (stats(peer) if peer else f"{ref:.2f} s") + f"; sitlpool {statistics.median(ours) / ref:.2f}× of it")


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-mcp-"))
    await bench_tools_list(tmp)
    one: dict = {}
    for _ in range(5):
        await hop(env(tmp), 10, one)
    report("process start to initialize answered", stats(one["init"]), "≤ 0.5 s (peer 1.09 s)")
    report("process start to tools/list answered (the SDK loaded)", stats(one["tools"]))
    modern = []
    for _ in range(5):  # the SDK's own Client, default mode: server/discover (the 2026-07-28 protocol)
        modern.append(await connect_modern(env(tmp)))
    report("process start to server/discover answered (mcp.Client)", stats(modern), "≤ 0.5 s")
    sdk = []
    for _ in range(3):  # the floor for tools/list: a Python that only imports the SDK
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "import mcp.server.mcpserver, mcp.server.stdio"], check=True)
        sdk.append(time.monotonic() - t)
    report("  a Python process that only imports the MCP SDK", stats(sdk))
    report("open_sitl to ready (built-in vehicle)", stats(one["open"]), "≤ 500 ms (peer 615–820 ms)")
    report("snapshot round trip", stats(one["snap"]), "≤ 10 ms")
    many: dict = {}
    t = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(hop, env(tmp), 2, many)
    report(
        "ten servers each flying one vehicle at once (speedup 2)",
        f"{len(many.get('hops', []))}/10 hops completed in {time.monotonic() - t:.1f} s",
        "all 10 complete",
    )


if __name__ == "__main__":
    anyio.run(main)
