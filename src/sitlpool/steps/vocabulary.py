"""The step vocabulary: the MCP flight tools' names and arguments (``session_id`` implied),
and ``{"hold_s": N}``. ``TOOLS`` names each tool's parameters and calls the same function
the MCP tool calls (the session's action, or the mavlink/world function on its link);
``validate_steps`` refuses a bad program before anything is launched, one line per problem."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import world
from ..conditions import CONDITIONS, check_value
from ..errors import SitlpoolError
from ..flight import MAX_ALTITUDE_M, check_finite
from ..mavlink import mission, params, rc
from ..mavlink.mission_items import what_to_send

MAX_STEPS = 10000
HOLD = "hold_s"
# hold until the vehicle's clock (sim seconds since it booted) reads N: a replayed session's timing
HOLD_UNTIL = "hold_until_s"
NOTE = "note"  # a step may carry a note (shown in progress), never sent anywhere


class StepError(SitlpoolError):
    """A step program that cannot run: one line naming the step and what is wrong."""


# kinds: "number", "int", "bool", "str", "dict", "list", "value" (number, text or null)
@dataclass(frozen=True)
class Tool:
    name: str
    run: Callable[[Any, dict], dict]  # (session, arguments) -> the tool's answer
    required: tuple[str, ...] = ()
    optional: dict[str, Any] = field(default_factory=dict)  # name -> default
    kinds: dict[str, str] = field(default_factory=dict)

    @property
    def parameters(self) -> tuple[str, ...]:
        return (*self.required, *self.optional)

    def describe(self) -> str:
        ps = [*self.required, *(f"{k}={v!r}" for k, v in self.optional.items())]
        return f"{self.name}({', '.join(ps)})"


def _link(s) -> Any:
    if s.link is None or s.handle.dead:
        raise SitlpoolError(f"session {s.id} is {s.state}; its SITL no longer runs")
    return s.link


def _writable(s, what: str) -> Any:
    link = _link(s)
    link.require_writable(what)
    return link


def _param(s, a: dict) -> dict:
    return {"name": str(a["name"]).upper(), "value": _link(s).get_param(a["name"])}


def _set_param(s, a: dict) -> dict:
    return {"name": str(a["name"]).upper(), "value": _link(s).set_param(a["name"], a["value"])}


def _inject(s, a: dict) -> dict:
    kind = a["kind"]
    world.check_kind(kind)
    opts = {k: a[k] for k in ("motor", "thrust", "voltage", "north_m", "east_m", "all", "neutral") if k in a}
    return world.inject_failure(_writable(s, f"inject_failure {kind}"), kind, **opts)


def _clear(s, a: dict) -> dict:
    world.check_kind(a["kind"])
    return world.clear_failure(_writable(s, f"clear_failure {a['kind']}"), a["kind"])


def _wait_until(s, a: dict) -> dict:  # the runner waits on sim time itself; this is the wall-clock form
    return s.wait_until(a["condition"], a.get("value"), a.get("timeout_s", 30))


_FAIL_OPTS = dict.fromkeys(("motor", "thrust", "voltage", "north_m", "east_m", "all", "neutral"))
_FAIL_KINDS = {
    "kind": "str",
    "motor": "int",
    "thrust": "number",
    "voltage": "number",
    "north_m": "number",
    "east_m": "number",
    "all": "bool",
    "neutral": "bool",
    "force": "bool",
}

_LIST = (
    Tool("snapshot", lambda s, a: s.snapshot()),
    Tool(
        "arm", lambda s, a: s.arm(wait_ready_s=a["wait_ready_s"]), (), {"wait_ready_s": 20}, {"wait_ready_s": "number"}
    ),
    Tool("disarm", lambda s, a: s.disarm(a["force"]), (), {"force": False}, {"force": "bool"}),
    Tool("set_mode", lambda s, a: s.set_mode(a["mode"]), ("mode",), {}, {"mode": "str"}),
    Tool("takeoff", lambda s, a: s.takeoff(a["altitude_m"]), ("altitude_m",), {}, {"altitude_m": "number"}),
    Tool(
        "goto",
        lambda s, a: s.goto(a["lat"], a["lon"], a["altitude_m"]),
        ("lat", "lon", "altitude_m"),
        {},
        {"lat": "number", "lon": "number", "altitude_m": "number"},
    ),
    Tool("land", lambda s, a: s.land()),
    Tool("rtl", lambda s, a: s.rtl()),
    Tool(
        "wait_until",
        _wait_until,
        ("condition",),
        {"value": None, "timeout_s": 30},
        {"condition": "str", "value": "value", "timeout_s": "number"},
    ),
    Tool(
        "rc_override",
        lambda s, a: rc.override(_link(s), a["channels"], a["seconds"]),
        ("channels",),
        {"seconds": None},
        {"channels": "dict", "seconds": "number"},
    ),
    Tool("get_param", _param, ("name",), {}, {"name": "str"}),
    Tool("set_param", _set_param, ("name", "value"), {}, {"name": "str", "value": "number"}),
    Tool("get_params", lambda s, a: params.get_all(_link(s), a["prefix"]), (), {"prefix": None}, {"prefix": "str"}),
    Tool("set_params", lambda s, a: params.set_many(_link(s), a["values"]), ("values",), {}, {"values": "dict"}),
    Tool(
        "upload_mission",
        lambda s, a: mission.upload(
            _link(s), a["items"], waypoints=a["waypoints"], plan=a["plan"], fence=a["fence"], rally=a["rally"]
        ),
        (),
        {"items": None, "waypoints": None, "plan": None, "fence": None, "rally": None},
        {"items": "list", "waypoints": "str", "plan": "str", "fence": "list", "rally": "list"},
    ),
    Tool(
        "download_mission",
        lambda s, a: mission.download(_link(s), a["format"], a["fence"], a["rally"]),
        (),
        {"format": "items", "fence": False, "rally": False},
        {"format": "str", "fence": "bool", "rally": "bool"},
    ),
    Tool("clear_mission", lambda s, a: mission.clear(_link(s))),
    Tool(
        "start_mission",
        lambda s, a: mission.start(_link(s), a["item"], ready=s.flight.readiness),
        (),
        {"item": None},
        {"item": "int"},
    ),
    Tool("mission_status", lambda s, a: mission.status(_link(s))),
    Tool(
        "set_wind",
        lambda s, a: world.set_wind(
            _writable(s, "set_wind"), a["speed_m_s"], a["direction_deg"], a["turbulence"], a["seed"], a["profile"]
        ),
        ("speed_m_s", "direction_deg"),
        {
            "turbulence": 0,
            "seed": None,
            "profile": None,
            "force": False,
        },  # force: the MCP tool's; a program's own session
        {
            "speed_m_s": "number",
            "direction_deg": "number",
            "turbulence": "number",
            "seed": "int",
            "profile": "str",
            "force": "bool",
        },
    ),
    Tool("wind_history", lambda s, a: world.wind_history(_link(s))),
    Tool("list_failures", lambda s, a: world.list_failures(_link(s))),
    Tool("inject_failure", _inject, ("kind",), {**_FAIL_OPTS, "force": False}, _FAIL_KINDS),
    Tool("clear_failure", _clear, ("kind",), {"force": False}, {"kind": "str", "force": "bool"}),
    Tool(
        "set_speedup",
        lambda s, a: world.set_speedup(_writable(s, "set_speedup"), a["speedup"]),
        ("speedup",),
        {"force": False},
        {"speedup": "number", "force": "bool"},
    ),
)
#: every tool a step may name, by name (the MCP tools of the same names and arguments)
TOOLS: dict[str, Tool] = {t.name: t for t in _LIST}


def allowed() -> str:
    return ", ".join(TOOLS) + ', or {"hold_s": N} or {"hold_until_s": T}'


def _kind_ok(kind: str, v: Any) -> bool:
    if v is None:
        return kind == "value"
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str) and v != ""
    if kind == "dict":
        return isinstance(v, Mapping)
    if kind == "list":
        return isinstance(v, list)
    if kind == "value":
        return isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    return True


_KIND_WORDS = {
    "number": "a finite number",
    "int": "a whole number",
    "bool": "true or false",
    "str": "a non-empty text",
    "dict": "an object",
    "list": "a list",
    "value": "a number or a text",
}


def check_step(i: int, step: Any) -> tuple[str, dict]:
    """``(tool, arguments with defaults)`` of step ``i`` (from 1), or a ``StepError``."""
    where = f"step {i}"
    if not isinstance(step, Mapping):
        raise StepError(
            f"{where} is {type(step).__name__} {str(step)[:60]!r}, not an object such as "
            '{"tool": "takeoff", "altitude_m": 10} or {"hold_s": 5}'
        )
    step = {k: v for k, v in step.items() if k != NOTE}
    if NOTE in step or any(not isinstance(k, str) for k in step):
        raise StepError(f"{where}: argument names must be texts")
    if "session_id" in step:
        raise StepError(f"{where}: session_id is implied (a step program flies its own session); remove it")
    if "tool" not in step:
        for key in (HOLD, HOLD_UNTIL):
            if key not in step:
                continue
            extra = sorted(set(step) - {key})
            if extra:
                raise StepError(f"{where}: a hold step takes only {key} (sim seconds), not {', '.join(extra)}")
            n = step[key]
            if not _kind_ok("number", n) or not 0 <= n <= 86400:
                raise StepError(f"{where}: {key} {n!r} must be sim seconds from 0 to 86400")
            return key, {key: float(n)}
        raise StepError(f'{where} names no tool: give "tool" (one of {allowed()})')
    name = step["tool"]
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise StepError(f"{where}: unknown tool {str(name)[:60]!r}; steps may use {allowed()}")
    args = {k: v for k, v in step.items() if k != "tool"}
    unknown = sorted(set(args) - set(tool.parameters))
    takes = f"{name} takes {', '.join(tool.parameters) or 'no arguments'}"
    if unknown:
        raise StepError(f"{where} ({name}): unknown argument{'s' * (len(unknown) > 1)} {', '.join(unknown)}; {takes}")
    missing = [p for p in tool.required if p not in args]
    if missing:
        raise StepError(f"{where} ({name}): {', '.join(missing)} missing; {takes}")
    for k, v in args.items():
        kind = tool.kinds.get(k)
        if kind and not (v is None and k in tool.optional) and not _kind_ok(kind, v):
            raise StepError(f"{where} ({name}): {k} {str(v)[:60]!r} is not {_KIND_WORDS[kind]}; {takes}")
    if name == "wait_until":
        if args["condition"] not in CONDITIONS:
            raise StepError(
                f"{where} (wait_until): unknown condition {args['condition']!r}; use one of {', '.join(CONDITIONS)}"
            )
        t = args.get("timeout_s", 30)
        if not 0 <= t <= 86400:
            raise StepError(f"{where} (wait_until): timeout_s {t!r} must be sim seconds from 0 to 86400")
    try:
        _check_values(name, {**tool.optional, **args})
    except SitlpoolError as e:
        raise StepError(f"{where} ({name}): {e}") from None
    return name, {**tool.optional, **args}


def _check_values(name: str, a: dict) -> None:
    """The checks a tool makes of its values that need no vehicle, made before anything launches
    (a batch of 1000 runs would otherwise launch 1000 SITLs to fail at this step)."""
    if name in ("inject_failure", "clear_failure"):
        world.check_kind(a["kind"])
    elif name == "goto":
        check_finite(a["lat"], "goto latitude", -90, 90, "degrees")
        check_finite(a["lon"], "goto longitude", -180, 180, "degrees")
        check_finite(a["altitude_m"], "goto altitude", 0, MAX_ALTITUDE_M, "m above home")
    elif name == "set_wind":
        world.wind_params(a["speed_m_s"], a["direction_deg"], a["turbulence"], a["profile"])
    elif name == "set_speedup":
        world.check_speedup(a["speedup"])
    elif name == "set_params":
        params.check_values(dict(a["values"]))
    elif name == "set_param":
        params.check_values({a["name"]: a["value"]})
    elif name == "upload_mission":
        what_to_send(a["items"], a["waypoints"], a["plan"], a["fence"], a["rally"])
    elif name == "wait_until":
        check_value(a["condition"], a["value"])


def validate_steps(steps: Any) -> list[tuple[str, dict]]:
    """Every step checked (tool known, arguments the tool's, of the right kinds), before
    anything runs: ``[(tool, arguments with defaults)]``, or ``StepError`` (one line, the first bad step)."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, list):
        raise StepError(
            f'steps must be a list of steps such as {{"tool": "takeoff", "altitude_m": 10}}, got {type(steps).__name__}'
        )
    if not steps:
        raise StepError("steps is empty: give at least one step")
    if len(steps) > MAX_STEPS:
        raise StepError(f"{len(steps)} steps is too many; at most {MAX_STEPS}")
    return [check_step(i, s) for i, s in enumerate(steps, 1)]
