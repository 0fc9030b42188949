"""Every command shown in README.md and docs/ runs here (or, where it cannot run on a test
machine, is parsed), so the docs cannot rot; and the pages list what the code has: every
setting, CLI command, MCP tool and layer.

The markers (``<!-- run -->``, ``<!-- parse -->`` and their options) are described in
docblocks.py and docs/development.md. What a parse block cannot have checked: commands of
programs other than sitlpool, sitlpool-sim, pytest, ``ray start`` and ``./dev`` (``sudo``,
``sim_vehicle.py``, a user's own script) are not run and not parsed; they are listed in the
test's output. Run blocks get a temporary HOME (so ``~/.local/share/sitlpool`` is a temporary
data dir, also named by SITLPOOL_DATA_DIR), a pool of the test's own instances and a
temporary working directory; nothing is written into the checkout (PYTHONDONTWRITEBYTECODE,
and ``./dev`` itself is never run: see docblocks.for_this_machine).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import anyio
import pytest
from docblocks import (
    COMMAND_LANGS,
    PAGES,
    ROOT,
    Block,
    all_blocks,
    anchors,
    command_lines,
    for_this_machine,
    substitutions,
    words,
)

from conftest import processes_under, wait_for
from mcp_client import server

VENV_BIN = Path(sys.executable).parent
BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.kind == "run" and "ray" not in b.options]
PARSE = [b for b in BLOCKS if b.kind == "parse"]
TIMEOUT_S = 240


# ---- the environment of a run block ---------------------------------------------------------


@dataclass
class DocEnv:
    tmp: Path
    home: Path
    work: Path
    data: Path
    env: dict[str, str]


def doc_environment(tmp: Path, instances: list[int]) -> DocEnv:
    """A user's environment on a fresh machine: HOME, data dir and working directory
    temporary, the pool the test's own instances, the venv's programs first on PATH."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir()
    work.mkdir()
    data = home / ".local" / "share" / "sitlpool"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SITLPOOL_", "RAY_", "PYTEST_", "XDG_")) and k not in ("VIRTUAL_ENV",)
    }
    env.update(
        HOME=str(home),
        SITLPOOL_DATA_DIR=str(data),
        SITLPOOL_POOL=f"{instances[0]}-{instances[-1]}",
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(VENV_BIN.parent),
        PYTHONDONTWRITEBYTECODE="1",
        RAY_USAGE_STATS_ENABLED="0",
    )
    return DocEnv(tmp, home, work, data, env)


@pytest.fixture
def doc_env(tmp_path, instances, monkeypatch) -> DocEnv:
    de = doc_environment(tmp_path, instances)
    for k in [k for k in os.environ if k.startswith(("SITLPOOL_", "XDG_"))]:
        monkeypatch.delenv(k)
    for k, v in de.env.items():  # pytester's runs inherit this process's environment
        monkeypatch.setenv(k, v)
    yield de
    leaked = processes_under(tmp_path)
    for pid in leaked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not leaked, f"a documented command left processes running: {leaked}"


def session_pids(sid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[3]) == sid and stat[0] != "Z":
                out.append(int(d))
    return out


def run_process(args: list[str], block: Block, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``args`` in a session of its own; whatever of the session outlives it is killed and fails the test."""
    p = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{block.id}: still running after {TIMEOUT_S}s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
    left = session_pids(p.pid)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"{block.id}: left processes running: {left}"
    return subprocess.CompletedProcess(args, p.returncode, out, err)


def expect_exit(block: Block, r: subprocess.CompletedProcess) -> None:
    want = int(block.options.get("exit", "0"))
    assert r.returncode == want, (
        f"{block.id}: exit status {r.returncode}, the docs say {want}\n"
        f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(de: DocEnv, port: int):
    """``sitlpool serve --http PORT`` in its own session, until its token file is written."""
    log = open(de.tmp / f"serve-{port}.log", "w+")
    p = subprocess.Popen(
        ["sitlpool", "serve", "--http", str(port)],
        cwd=de.work,
        env=de.env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    token = de.data / "http" / f"serve-{port}.token"
    try:
        try:
            wait_for(lambda: token.exists() or p.poll() is not None, 60, 0.1, "the HTTP server's token file")
        except AssertionError:
            log.seek(0)
            raise AssertionError(f"no token file {token} after 60 s; server output:\n{log.read()[-3000:]}") from None
        if p.poll() is not None:
            log.seek(0)
            pytest.fail(f"sitlpool serve --http {port} exited {p.returncode}:\n{log.read()[-3000:]}")
        wait_for(lambda: _listening(port), 30, 0.1, f"the HTTP server to listen on {port}")
        yield token.read_text().strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---- run blocks -----------------------------------------------------------------------------


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_run_block(block: Block, doc_env: DocEnv, request):
    """The block runs as the docs show it and exits as they say."""
    run_block(block, doc_env, request.getfixturevalue("pytester") if block.is_pytest_file else None)


def run_block(block: Block, de: DocEnv, pytester=None) -> None:
    port = block.options.get("serve-http")
    if port:
        new = free_port()
        block = Block(block.page, block.line, block.lang, block.text.replace(port, str(new)), block.kind, block.options)
        with http_server(de, new) as token:
            _run(block, de, pytester, token)
    else:
        _run(block, de, pytester, None)


def _run(block: Block, de: DocEnv, pytester, token: str | None) -> None:
    cwd = ROOT if block.options.get("cwd") == "checkout" else de.work
    if block.lang in ("bash", "sh", "shell"):
        for tool in ("jq", "curl"):  # common, but not sitlpool's to install
            if re.search(rf"(^|[|;]\s*){tool}\b", block.text, re.M) and not shutil.which(tool, path=de.env["PATH"]):
                pytest.skip(f"{block.id} uses {tool}, which this machine does not have")
        for line in command_lines(block.text):
            if line.startswith(("./dev test", "./dev bench")):
                check_dev(words(line), block)
        script = for_this_machine(block.text, de.tmp)
        expect_exit(block, run_process(["bash", "-e", "-o", "pipefail", "-c", script], block, cwd, de.env))
    elif block.is_pytest_file:
        assert pytester is not None
        pytester.makepyfile(**{f"test_doc_{block.page.stem.replace('-', '_')}_{block.line}": block.text})
        args = block.options.get("pytest", "").split()
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=TIMEOUT_S)
        outcomes = r.parseoutcomes()
        assert outcomes.get("passed", 0) >= 1 and not outcomes.get("failed") and not outcomes.get("errors"), (
            f"{block.id}: {outcomes}\n" + "\n".join(r.outlines[-60:])
        )
    elif block.lang in ("python", "py"):
        script = de.work / f"doc_{block.line}.py"
        script.write_text(block.text)
        expect_exit(block, run_process([sys.executable, str(script)], block, cwd, de.env))
    elif block.lang == "json":
        anyio.run(check_client_config, json.loads(block.text), de, token)
    else:
        pytest.fail(f"{block.id}: no way to run a {block.lang!r} block")


async def check_client_config(config: dict, de: DocEnv, token: str | None) -> None:
    """Connect to every server an MCP client configuration names, as the client would, and list its tools."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from mcp import ClientSession

    servers = config["mcpServers"]
    assert servers, "a client configuration without servers"
    for name, cfg in servers.items():
        if cfg.get("type") == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            assert token is not None, f"{name}: an HTTP configuration needs a serve-http marker"
            headers = {k: v.replace("<token>", token) for k, v in cfg.get("headers", {}).items()}
            async with httpx2.AsyncClient(headers=headers) as http:
                async with streamable_http_client(cfg["url"], http_client=http) as (r, w):
                    async with ClientSession(r, w) as session:
                        await session.initialize()
                        tools = (await session.list_tools()).tools
        else:
            command = shutil.which(cfg["command"], path=de.env["PATH"])
            assert command, f"{name}: {cfg['command']} is not on PATH"
            # the configuration's own variables, but the test's pool and data dir
            env = {**de.env, **cfg.get("env", {}), "SITLPOOL_POOL": de.env["SITLPOOL_POOL"]}
            params = StdioServerParameters(command=command, args=cfg.get("args", []), env=env)
            with open(os.devnull, "w") as log:
                async with stdio_client(params, errlog=log) as (r, w):
                    async with ClientSession(r, w) as session:
                        await session.initialize()
                        tools = (await session.list_tools()).tools
        assert "open_sitl" in {t.name for t in tools}, f"{name}: tools {[t.name for t in tools]}"


# ---- parse blocks ---------------------------------------------------------------------------

NOT_CHECKED: list[str] = []


@pytest.mark.parametrize("block", PARSE, ids=[b.id for b in PARSE])
def test_parse_block(block: Block):
    """What cannot run here is at least well-formed: sitlpool's parser takes it, other
    programs know its options, python compiles and its sitlpool names exist."""
    if block.lang in ("python", "py"):
        check_python(block)
        return
    assert block.lang in ("bash", "sh", "shell"), f"{block.id}: cannot parse a {block.lang!r} block"
    unchecked = []
    for line in command_lines(block.text):
        for sub in substitutions(line):
            check_command(words(sub), block)
        w = words(line)
        if not check_command(w, block):
            unchecked.append(line)
    if unchecked:
        print(f"{block.id}: not sitlpool's, not checked: {unchecked}")


def check_command(w: list[str], block: Block) -> bool:
    """Check one command's words; False when it is no program this test knows."""
    if not w:
        return True
    prog, args = w[0], w[1:]
    if prog == "sitlpool":
        check_sitlpool(args, block)
    elif prog == "export":
        for a in args:
            name = a.partition("=")[0]
            if name.startswith("SITLPOOL_"):
                assert name in (ROOT / "docs" / "configuration.md").read_text(), f"{block.id}: {name} is not documented"
    elif prog == "pytest":
        check_options(args, help_text(("pytest",)), block)
    elif prog == "sitlpool-sim":
        check_options(args, help_text(("sitlpool-sim",)), block)
    elif prog == "ray" and args[:1] == ["start"]:
        check_options(args[1:], help_text(("ray", "start")), block)
    elif prog == "./dev":
        check_dev(w, block)
    else:
        return False
    return True


def check_sitlpool(args: list[str], block: Block) -> None:
    from sitlpool.cli import parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser().parse_args(args)
        except SystemExit as e:
            assert e.code == 0, f"{block.id}: sitlpool {' '.join(args)}: {err.getvalue().strip()}"


@cache
def help_text(prog: tuple[str, ...]) -> str:
    if prog == ("pytest",):
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"]
    else:
        cmd = [str(VENV_BIN / prog[0]), *prog[1:], "--help"]
        if not Path(cmd[0]).exists():
            pytest.skip(f"{prog[0]} is not installed in this venv")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/", env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def check_options(args: list[str], help_: str, block: Block) -> None:
    for a in args:
        if a.startswith("-") and a != "-" and not re.match(r"-[\d.]", a):  # not a negative number
            opt = a.partition("=")[0]
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", help_), f"{block.id}: unknown option {opt}"


def check_dev(w: list[str], block: Block) -> None:
    """``./dev CMD``: a command the script has, with options its target knows, paths that exist."""
    dev = (ROOT / "dev").read_text()
    sub, args = w[1], w[2:]
    if sub == "test":
        assert re.search(r"^\s*test\)", dev, re.M), f"{block.id}: ./dev has no test command"
        check_options(args, help_text(("pytest",)), block)
        for a in args:
            if a.startswith("tests/"):
                assert (ROOT / a).exists(), f"{block.id}: {a} does not exist"
    elif sub == "bench":
        bench = ROOT / "bench" / f"{args[0]}.py"
        assert bench.exists(), f"{block.id}: no benchmark {bench.name} in bench/"
        for a in args[1:]:
            assert a in bench.read_text(), f"{block.id}: bench/{bench.name} does not take {a}"
    elif sub == "demo":
        assert re.search(r"^\s*demo\)", dev, re.M), f"{block.id}: ./dev has no demo command"
        check_sitlpool(["demo", *args], block)
    else:  # any program of the venv
        assert (VENV_BIN / sub).exists(), f"{block.id}: ./dev {sub}: no such program in the venv"


def check_python(block: Block) -> None:
    tree = ast.parse(block.text, filename=block.id)
    compile(tree, block.id, "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sitlpool"):
            mod = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(mod, alias.name), f"{block.id}: {node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sitlpool"):
                    importlib.import_module(alias.name)


# ---- the pages ------------------------------------------------------------------------------


def test_every_command_block_says_whether_it_runs():
    missing = [b.id for b in BLOCKS if b.lang in COMMAND_LANGS and b.kind is None]
    assert not missing, f"command blocks without <!-- run --> or <!-- parse -->: {missing}"
    bad = [b.id for b in BLOCKS if b.kind == "run" and b.lang not in COMMAND_LANGS | {"json"}]
    assert not bad, f"run markers on blocks that are not commands: {bad}"


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    top = next(b for b in BLOCKS if b.page.name == "README.md")
    assert [ln.split("#")[0].strip() for ln in command_lines(top.text)] == ["./dev demo", "./dev test"]
    assert any(ln.startswith("./dev test") for ln in lines)  # .ci/run runs ./dev test
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


def test_links_and_anchors_resolve():
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s:]*)(?:#([^)\s]+))?\)", page.read_text()):
            dest = (page.parent / target).resolve() if target else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, f"links to nothing: {broken}"


def test_docs_carry_no_history():
    """One page per subject, as things are: no diary."""
    found = []
    for page in PAGES:
        for i, line in enumerate(page.read_text().splitlines(), 1):
            if re.search(r"this session|last session|\bissue \d+|DESIGN\.md", line, re.I):
                found.append(f"{page.name}:{i}: {line.strip()}")
    assert not found, found


def test_every_setting_is_documented():
    names = set()
    for f in (ROOT / "src" / "sitlpool").rglob("*.py"):
        names |= set(re.findall(r"SITLPOOL_[A-Z0-9_]*[A-Z0-9]", f.read_text()))
    names -= {"SITLPOOL_"}
    page = (ROOT / "docs" / "configuration.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_every_cli_command_is_documented():
    import argparse

    from sitlpool.cli import parser

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    page = (ROOT / "docs" / "cli.md").read_text()
    missing = [name for name in sub.choices if f"`sitlpool {name}" not in page]
    assert not missing, f"docs/cli.md does not document {missing}"


def test_mcp_page_lists_exactly_the_servers_tools(doc_env):
    page = (ROOT / "docs" / "mcp.md").read_text()
    documented = {n for line in page.splitlines() if line.startswith("| `") for n in re.findall(r"`(\w+)\(", line)}

    async def listed():
        async with server(doc_env.env) as client:
            return {t.name for t in (await client.session.list_tools()).tools}

    tools = anyio.run(listed)
    assert documented == tools, f"only in docs/mcp.md: {documented - tools}; undocumented: {tools - documented}"


def test_architecture_page_shows_the_layers_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    page = ROOT / "docs" / "architecture.md"
    shown = next(b for b in all_blocks() if b.page == page and b.lang == "text").text.split("\n")
    assert [ln.strip() for ln in shown if ln.strip()] == [" | ".join(p.strip() for p in ly.split("|")) for ly in layers]
