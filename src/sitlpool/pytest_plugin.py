"""pytest plugin (entry point ``pytest11``): a leased SITL per test, safe under xdist
and beside every other user of the machine.

Fixtures: ``sitl_lease`` (just a lease), ``sitl`` (a launched, ready vehicle with a
connected link), ``sitl_factory`` (several per test), ``attached_sitl`` (read-only
attach to ``--sitl-attach N|ENDPOINT``). Marker: ``@pytest.mark.sitl(model=...,
speedup=..., params={...})``. Nothing is shared between workers but the leases: a
killed worker's leases die with it, and its SITLs exit with their parent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .config import load_settings
from .errors import SitlpoolError
from .leases import LeasePool
from .mavlink.recorder import attach
from .picture import save_link
from .process import ManagedManager, UnmanagedManager
from .process.managed import stderr_tail

if TYPE_CHECKING:
    from .fleet.testing import FleetManager
    from .vehicle import Sitl

# pytest loads this plugin in every run of the environment, SITLs or not: the flight layer
# (``Sitl``'s home, which loads pymavlink) is imported when a fixture first needs it

OPTIONS = {  # option -> (ini key, help)
    "--sitl-binary": (
        "sitl_binary",
        "a real ArduPilot SITL binary (default: SITLPOOL_SITL_BINARY or the built-in vehicle)",
    ),
    "--sitl-pool": ("sitl_pool", 'instances to lease from, e.g. "40-59" (default: SITLPOOL_POOL)'),
    "--sitl-speedup": ("sitl_speedup", "SITL speedup for the sitl fixtures (default 1)"),
    "--sitl-wait": ("sitl_wait", "seconds to wait for a free instance, so parallel suites queue (default 60)"),
    "--sitl-attach": ("sitl_attach", "instance number or tcp:HOST:PORT for the attached_sitl fixture"),
    "--sitl-ray": ("sitl_ray", "a Ray cluster (HOST:PORT of its head) to place the sitl fixtures' SITLs on"),
}
STASH = pytest.StashKey[list]()

__all__ = ["Sitl"]


def __getattr__(name: str):
    """``sitlpool.pytest_plugin.Sitl``: ``sitlpool.vehicle.Sitl``, re-exported (loaded on first use)."""
    if name == "Sitl":
        from .vehicle import Sitl

        return Sitl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_addoption(parser):
    group = parser.getgroup("sitlpool", "leased ArduPilot SITL instances")
    for opt, (ini, help_) in OPTIONS.items():
        group.addoption(opt, dest=ini, default=None, help=help_)
        parser.addini(ini, help_, default=None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sitl(model='quad', speedup=None, params=None, home=None): configure the sitl fixture"
    )


def _opt(config, ini: str):
    v = config.getoption(ini)
    return v if v not in (None, "") else (config.getini(ini) or None)


class _Ctx:
    """Per-session settings, read once (each xdist worker has its own)."""

    def __init__(self, config):
        overrides = {}
        if _opt(config, "sitl_pool"):
            overrides["pool"] = _opt(config, "sitl_pool")
        if _opt(config, "sitl_binary"):
            overrides["sitl_binary"] = _opt(config, "sitl_binary")
        self.settings = load_settings(**overrides)
        self.speedup = float(_opt(config, "sitl_speedup") or 1)
        self.wait = float(_opt(config, "sitl_wait") or 60)
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.ray = _opt(config, "sitl_ray")


@pytest.fixture(scope="session")
def _sitlpool_ctx(pytestconfig):
    try:
        return _Ctx(pytestconfig)
    except SitlpoolError as e:
        raise pytest.UsageError(str(e)) from None


def _owner(ctx: _Ctx, request, what: str) -> str:
    return f"pytest {request.node.nodeid} [{what}] ({ctx.worker} pid {os.getpid()})"


@pytest.fixture
def sitl_lease(_sitlpool_ctx, request):
    """An instance lease (waits up to --sitl-wait for one), released after the test."""
    ctx = _sitlpool_ctx
    with LeasePool.from_settings(ctx.settings).acquire(_owner(ctx, request, "lease"), wait=ctx.wait) as lease:
        yield lease


def _record(h) -> None:
    """The toolkit's flight recorder from the first message, for the picture of a failure."""
    if h.link is not None:
        attach(h.link)


def _marker_kwargs(request) -> dict:
    m = request.node.get_closest_marker("sitl")
    return dict(m.kwargs) if m else {}


@pytest.fixture
def sitl_factory(_sitlpool_ctx: _Ctx, request: pytest.FixtureRequest) -> Iterator[Callable[..., Sitl]]:
    """``sitl_factory(model='quad', speedup=..., params=..., home=...)`` -> a ready Sitl; all stopped after the test."""
    from .vehicle import Sitl  # the flight layer, on first use (see the imports above)

    ctx = _sitlpool_ctx
    manager: ManagedManager | FleetManager
    if ctx.ray:
        # the SITLs come from the cluster; imported here: Ray is an optional dependency
        from .fleet.testing import manager as fleet_manager

        manager = fleet_manager(ctx.ray)
    else:
        manager = ManagedManager(ctx.settings)
    made: list[Sitl] = []
    request.node.stash[STASH] = made
    defaults = _marker_kwargs(request)

    def make(**kw) -> Sitl:
        opts = {**defaults, **kw}
        speedup = opts.pop("speedup", None) or ctx.speedup
        h = manager.start(
            f"{request.node.name}-{len(made)}",
            speedup=speedup,
            wait=ctx.wait,
            owner=_owner(ctx, request, f"sitl {len(made)}"),
            **opts,
        )
        if not ctx.ray:  # the recorder listens to a local link; a remote one forwards calls only
            _record(h)
        s = Sitl(h)
        made.append(s)
        return s

    yield make
    manager.close_all()


@pytest.fixture
def sitl(sitl_factory):
    """A launched, ready vehicle on its own leased instance, with a connected link (``sitl.link``)."""
    return sitl_factory()


@pytest.fixture
def attached_sitl(_sitlpool_ctx, request, pytestconfig):
    """A read-only attachment to the SITL named by --sitl-attach (skipped when not given)."""
    from .vehicle import Sitl  # the flight layer, on first use (see the imports above)

    target = _opt(pytestconfig, "sitl_attach")
    if not target:
        pytest.skip("attached_sitl needs --sitl-attach N|tcp:HOST:PORT")
    kw = {"instance": int(target)} if str(target).isdigit() else {"endpoint": target}
    m = UnmanagedManager()
    h = m.start(f"attach-{request.node.name}", **kw)
    _record(h)
    s = Sitl(h)
    request.node.stash[STASH] = [s]
    yield s
    m.close_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    for s in item.stash.get(STASH, []):
        h = s.handle
        lines = [f"instance {h.instance}, pid {h.pid}, {'dead: ' + h.status.reason if h.dead else 'running'}"]
        if h.link is not None:
            v = h.link.vehicle
            lines.append(f"mode {v.mode}, armed {v.armed}, relative altitude {v.rel_alt} m")
            lines.append("last STATUSTEXTs:")
            lines += [f"  {t}" for _, _, t in list(v.texts)[-10:]] or ["  (none)"]
            try:  # a failure to draw never hides the report
                d = Path(item.config._tmp_path_factory.getbasetemp()) / "sitlpool-pictures"
                p = save_link(h.link, d / f"{item.name}-{h.name}.png", title=f"{item.nodeid} ({h.name})")
                lines.append(f"flight picture: {p}")
            except Exception as e:  # pragma: no cover
                lines.append(f"flight picture: not drawn ({e})")
        cwd = getattr(h, "cwd", None)
        if cwd is not None:
            tail = stderr_tail(Path(cwd) / "stderr", 15)
            lines.append("tail of the SITL's stderr:")
            lines += [f"  {t}" for t in tail.splitlines()] or ["  (empty)"]
        rep.sections.append((f"sitlpool: {h.name}", "\n".join(lines)))
