"""pytest plugin (entry point ``pytest11``): a leased SITL per test, safe under xdist
and beside every other user of the machine.

Fixtures: ``sitl_lease`` (just a lease), ``sitl`` (a launched, ready vehicle with a
connected link), ``sitl_factory`` (several per test), ``attached_sitl`` (read-only
attach to ``--sitl-attach N|ENDPOINT``). Marker: ``@pytest.mark.sitl(preset=..., model=...,
speedup=..., home=..., params={...}, param_files=[...], scripts=[...], wind={...})``, the
keywords ``sitl_factory`` takes (a preset under them: ``preset=``, else ``--sitl-preset``).
Nothing is shared between workers but the leases: a killed worker's leases die with it, and
its SITLs exit with their parent.

Flight logs: the log store keeps every SITL's DataFlash logs when it stops (after the
test). A failing test's logs are pinned (never pruned by the budget) and named in its
report: a section ``sitlpool logs (kept at teardown)`` and ``user_properties``
(``sitlpool_log_id`` / ``sitlpool_log_path``, in JUnit XML as properties). They are only
known once the test's SITLs stop, so they travel in the teardown report, which xdist sends on
and the failure summary shows; the failed call's own section names the live log.
``--sitl-keep-logs`` does the same for every test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import picture, presets
from .config import load_settings
from .errors import SitlpoolError
from .leases import LeasePool
from .mavlink.recorder import attach
from .process import ManagedManager, ManagedSitl, UnmanagedManager, UnmanagedSitl
from .process.output import stderr_tail
from .world import held_elsewhere

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
    "--sitl-preset": ("sitl_preset", "a preset (sitlpool presets lists them) the sitl fixtures' SITLs start from"),
}
KEEP_LOGS_HELP = "pin every test's SITL logs in the log store and name them in its report (default: a failing test's)"
LOGS_SECTION = "sitlpool logs (kept at teardown)"  # "teardown" in the name: the failure summary shows it
STASH = pytest.StashKey[list]()  # the test's Sitl handles
FAILED = pytest.StashKey[bool]()  # its setup or call failed
LIVE = pytest.StashKey[dict]()  # vehicle name -> the log it was writing when the test failed
CTX = pytest.StashKey["_Ctx"]()  # on the config: the session's settings, once a fixture read them

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
    group.addoption("--sitl-keep-logs", dest="sitl_keep_logs", action="store_true", default=None, help=KEEP_LOGS_HELP)
    parser.addini("sitl_keep_logs", KEEP_LOGS_HELP, type="bool", default=False)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "sitl(preset=None, model='quad', speedup=None, home=None, params=None, param_files=None, scripts=None, "
        "wind=None): configure the sitl fixture",
    )
    if _opt(config, "sitl_preset"):  # a preset that does not exist: a usage error before any test
        try:
            _Ctx(config)
        except SitlpoolError as e:
            raise pytest.UsageError(str(e)) from None


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
        self.keep_logs = bool(_opt(config, "sitl_keep_logs"))
        self.preset = _opt(config, "sitl_preset")
        if self.preset is not None:
            presets.get(self.preset, self.settings)  # an unknown name is a usage error, before any test


@pytest.fixture(scope="session")
def _sitlpool_ctx(pytestconfig):
    try:
        ctx = _Ctx(pytestconfig)
    except SitlpoolError as e:
        raise pytest.UsageError(str(e)) from None
    pytestconfig.stash[CTX] = ctx
    return ctx


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
    """``sitl_factory(preset=..., model='quad', speedup=..., home=..., params=..., param_files=[...],
    scripts=[...], wind={...})`` -> a ready Sitl; all stopped after the test. The given options
    win over the marker's, which win over the preset's (``preset=``, else ``--sitl-preset``)."""
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
        opts = _launch_options(ctx, {**defaults, **kw})
        wind = opts.pop("wind", None)
        speedup = opts.pop("speedup", None) or ctx.speedup
        h = manager.start(
            f"{request.node.name}-{len(made)}",
            speedup=speedup,
            wait=ctx.wait,
            owner=_owner(ctx, request, f"sitl {len(made)}"),
            **opts,
        )
        s = Sitl(h)
        made.append(s)  # stopped after the test whatever happens next
        if not ctx.ray:  # the recorder listens to a local link; a remote one forwards calls only
            _record(h)
            if wind is not None:  # the first entry of world.wind_history, as open_sitl's wind
                from .world import record_open_wind  # the flight layer (pymavlink): only with a wind

                record_open_wind(h.link, wind)
        return s

    yield make
    manager.close_all()
    if not ctx.ray:
        _recipes(made, request, ctx)
    _stopped(request, ctx)


def _recipes(made: list, request, ctx) -> None:
    """Each test SITL's recipe, as every MCP session has one (``repro`` flies it again)."""
    from .steps import record_handle  # the steps layer: only once a test's SITLs flew

    for i, s in enumerate(made):
        try:
            record_handle(s.handle, label=f"{request.node.nodeid} [{i}]", settings=ctx.settings)
        except Exception as e:  # a recipe never fails a test
            request.node.warn(pytest.PytestWarning(f"sitlpool: no recipe written for {s.handle.name}: {e}"))


def _launch_options(ctx: _Ctx, opts: dict) -> dict:
    """The marker's and the call's options with their preset under them (``preset=``, else
    ``--sitl-preset``) and ``wind`` as its ``SIM_WIND_*`` parameters (kept as ``wind``: the
    values, for the wind history); everything checked before anything is leased."""
    preset = opts.pop("preset", None) or ctx.preset
    wind = opts.pop("wind", None)
    out = presets.merge(preset, ctx.settings, **opts)
    for k in ("label", "wait_s"):  # the plugin names its SITLs and waits --sitl-wait for a slot
        out.pop(k, None)
    if wind is not None:
        from .world import wind_option  # the flight layer (pymavlink): only with a wind

        values = wind_option(wind)
        params = dict(out.get("params") or {})
        clash = sorted(k for k in values if k in {str(p).upper() for p in params})
        if clash:
            raise SitlpoolError(f"sitl: wind and params both set {', '.join(clash)}; give one")
        out["params"] = {**params, **values}
        out["wind"] = values
    return out


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
    _stopped(request, _sitlpool_ctx)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "teardown":
        _report_logs(item, rep)
        return
    if not rep.failed:
        return
    item.stash[FAILED] = True
    if rep.when == "call":
        for s in item.stash.get(STASH, []):
            rep.sections.append((f"sitlpool: {s.handle.name}", "\n".join(_vehicle_lines(item, s))))


def _draw(link, path: Path, title: str) -> Path:
    """The flight picture of ``link`` as a PNG at ``path``. A link a Ray node holds (a fleet's
    ``RemoteLink``, which has ``on_node``, looked up on its class as its ``__getattr__`` forwards
    every name) draws on the node, where its flight recorder is."""
    if held_elsewhere(link):
        png, _ = link.on_node(picture.of_link, None, title)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return path
    return picture.save_link(link, path, title=title)


def _vehicle_lines(item, s: Sitl) -> list[str]:
    """What a failing test's report says of one of its vehicles, while it still runs."""
    h = s.handle
    state = f"dead: {h.status.reason if h.status else 'ended'}" if h.dead else "running"
    lines = [f"instance {h.instance}, pid {h.pid}, {state}"]
    if h.link is not None:
        v = h.link.vehicle
        lines.append(f"mode {v.mode}, armed {v.armed}, relative altitude {v.rel_alt} m")
        lines.append("last STATUSTEXTs:")
        lines += [f"  {t}" for _, _, t in list(v.texts)[-10:]] or ["  (none)"]
        try:  # a failure to draw never hides the report
            d = Path(item.config._tmp_path_factory.getbasetemp()) / "sitlpool-pictures"
            p = _draw(h.link, d / f"{item.name}-{h.name}.png", f"{item.nodeid} ({h.name})")
            lines.append(f"flight picture: {p}")
        except Exception as e:  # one line: never Ray's dump of what it could not serialize
            lines.append(f"flight picture: not drawn ({type(e).__name__}: {' '.join(str(e).split())[:200]})")
    live = _live(s)  # kept and pinned once the SITL stops (the teardown section names it)
    item.stash.setdefault(LIVE, {})[h.name] = live
    lines.append(f"log being written: {live if live is not None else '(none yet)'}")
    cwd = getattr(h, "cwd", None)
    if cwd is not None:
        tail = stderr_tail(Path(cwd) / "stderr", 15)
        lines.append("tail of the SITL's stderr:")
        lines += [f"  {t}" for t in tail.splitlines()] or ["  (empty)"]
    return lines


def _report_logs(item, rep) -> None:
    """Name a failing test's kept logs in its teardown report (every test's with
    --sitl-keep-logs), pinned; its SITLs stopped (their logs kept) before this report."""
    ctx = item.config.stash.get(CTX, None)
    if ctx is None or not _wants_logs(item, ctx, rep.failed):
        return
    n = len(rep.user_properties)
    lines = _pin_logs(item, ctx, rep.user_properties)
    if len(rep.user_properties) > n:
        lines.append("read one with `sitlpool logs show ID`, or open its path in MAVExplorer")
    rep.sections.append((LOGS_SECTION, "\n".join(lines)))


def _wants_logs(item, ctx: _Ctx, failed: bool = False) -> bool:
    return bool(item.stash.get(STASH, [])) and (ctx.keep_logs or failed or item.stash.get(FAILED, False))


def _pin_logs(item, ctx: _Ctx, props: list | None = None) -> list[str]:
    """Pin the kept logs of the test's SITLs (already stopped); one line per log (or per SITL
    that left none) for the report, and ``sitlpool_log_id``/``_path`` pairs added to ``props``."""
    lines: list[str] = []
    store = None
    for s in item.stash.get(STASH, []):
        where = f"{s.handle.name} (instance {s.handle.instance})"
        records = s.kept_logs
        if not records:
            lines.append(f"{where}: {_why_none(item, s)}")
        for r in records:
            state = "pinned"
            if not r.pinned:
                try:
                    if store is None:
                        # sitlpool.logs loads pymavlink's DFReader and numpy (~0.5 s): only to pin a log
                        from .logs import LogStore

                        store = LogStore(ctx.settings.data_dir)
                    store.pin(r.id)
                    r.pinned = True  # the handle's record too (sitl.kept_logs)
                except (SitlpoolError, OSError) as e:  # the log is kept all the same: say so, never fail the run
                    state = f"kept, not pinned: {e}"
            lines.append(f"{where}: log {r.id} {r.path} ({state})")
            if props is not None:
                props += [("sitlpool_log_id", r.id), ("sitlpool_log_path", r.path)]
    return lines


def _stopped(request: pytest.FixtureRequest, ctx: _Ctx) -> None:
    """A fixture's SITLs stopped: pin their logs at once if the test failed (or --sitl-keep-logs),
    before any later teardown can go wrong."""
    if _wants_logs(request.node, ctx):
        _pin_logs(request.node, ctx)


def _why_none(item, s: Sitl) -> str:
    h = s.handle
    live = item.stash.get(LIVE, {}).get(h.name) or (None if h.dead else _live(s))
    if isinstance(h, UnmanagedSitl):
        return "attached, not ours: its logs stay where it writes them" + (f" ({live})" if live else "")
    if not isinstance(h, ManagedSitl):
        return "its logs are kept on the node it ran on"
    if live is None:
        return "no log kept (it wrote none)"
    return f"no log kept ({'it still writes' if not h.dead else 'it was writing'} {live})"


def _live(s: Sitl) -> Path | None:
    try:
        return s.log_path
    except Exception:  # pragma: no cover - only for a line of the report
        return None
