"""MCP prompts for whole jobs: short recipes that use sitlpool's own tools in the order real
ArduCopter needs (readiness before GUIDED and arming, what to wait for, how to read the log
afterwards). Each prompt is one user message; its arguments fill the recipe in."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

OPEN = (
    "open_sitl({open_args}) and keep its session_id; its answer's `config` says the configuration the "
    "vehicle really got (parameters read back), so check it before you fly"
)
READY = (
    'wait_until(condition="ready_to_arm", timeout_s=55), again while it answers timeout: real ArduCopter '
    "needs about 25-45 s of sim time before its EKF uses GPS (snapshot's not_ready_because says why not yet)"
)
GUIDED = 'set_mode(session_id, mode="GUIDED") only after that, then arm(session_id)'
CLOSE = "close_sitl(session_id): the SITL stops, its lease is freed and its DataFlash log is kept (the answer's `logs`)"
LOG = (
    "list_logs(session_id=...) then log_summary(log_id): phases, modes, max altitude, events, errors, failsafes "
    "and MSG texts, each with its log time"
)


def _open_args(preset: str, extra: str = "") -> str:
    parts = [f'preset="{preset}"'] if preset else []
    if extra:
        parts.append(extra)
    return ", ".join(parts) or 'model="quad"'


def _steps(*steps: str) -> str:
    return "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))


def preflight(preset: str = "", home: str = "") -> str:
    """Open a session and check it is configured and ready before any flight."""
    extra = f'home="{home}"' if home else ""
    return "Preflight check of a SITL vehicle with sitlpool:\n" + _steps(
        "list_presets() if you are not sure which preset to use (their options, and the named homes such as CMAC).",
        OPEN.format(open_args=_open_args(preset, extra)) + ".",
        READY + ".",
        "snapshot(session_id): mode, armed (should be false), position and home, GPS fix, battery; "
        "report anything unexpected.",
        'get_params(session_id, prefix="FS_") and get_params(session_id, prefix="BATT_"): the failsafes that would act.',
        "Report: ready or not and why, the configuration read back, the failsafe settings. Leave the session open "
        "for the flight, or " + CLOSE + ".",
    )


def hop(preset: str = "", altitude_m: str = "10", hold_s: str = "5") -> str:
    """Take off, hover, land: the shortest flight, in the order real ArduCopter needs."""
    return f"A hop to {altitude_m} m with sitlpool:\n" + _steps(
        OPEN.format(open_args=_open_args(preset)) + ".",
        READY + ".",
        GUIDED + " (ArduCopter disarms again after about 10 s on the ground without a takeoff).",
        f'takeoff(altitude_m={altitude_m}), then wait_until(condition="altitude_above", '
        f"value={altitude_m}*0.95, timeout_s=55).",
        f'Hover {hold_s} s: wait_until(condition="landed", timeout_s={hold_s}) answers timeout after it '
        "(snapshot shows the position meanwhile).",
        'land(), then wait_until(condition="landed", timeout_s=55) and wait_until(condition="disarmed", '
        "timeout_s=55): ArduCopter disarms itself once landed.",
        CLOSE + ".",
        LOG + ". Report the maximum altitude, the time in each phase and any error.",
    )


def mission(preset: str = "", description: str = "a square of 4 waypoints 50 m apart at 20 m") -> str:
    """Fly a mission in AUTO: upload, start, follow to the end, read the log."""
    return f"Fly a mission ({description}) with sitlpool:\n" + _steps(
        OPEN.format(open_args=_open_args(preset)) + ".",
        "upload_mission(session_id, items=[...]): a takeoff item first (ArduCopter AUTO starts with it), then the "
        'waypoints, then {"command": "rtl"} or a land; download_mission to check what the vehicle holds.',
        READY + ".",
        "start_mission(session_id): it sets GUIDED, arms and sends MISSION_START (refusals carry the vehicle's reasons).",
        'wait_until(condition="mission_item", value=N) for progress, or wait_until(condition="mission_done", '
        "timeout_s=55) repeated; mission_status(session_id) says the current item.",
        'wait_until(condition="disarmed", timeout_s=55) after the landing; flight_picture(session_id) shows the track.',
        CLOSE + ".",
        LOG + ". Report the items reached, the time taken and any error.",
    )


def failsafe_test(preset: str = "", kind: str = "battery_low", altitude_m: str = "20") -> str:
    """Inject a failure in flight and check the failsafe ArduCopter takes."""
    gcs = kind == "gcs_loss"
    slow = (
        " Keep speedup <= 4 for gcs_loss: sitlpool's GCS heartbeat is once a wall second, so above 4 it is "
        "more than FS_GCS_TIMEOUT of sim time between two and the failsafe fires without any injection."
        if gcs
        else ""
    )
    return f"Test the {kind} failsafe with sitlpool:\n" + _steps(
        OPEN.format(open_args=_open_args(preset, "speedup=4" if gcs else "")) + "." + slow,
        READY + ".",
        GUIDED + f', takeoff(altitude_m={altitude_m}), wait_until(condition="altitude_above", '
        f"value={altitude_m}*0.95, timeout_s=55).",
        "list_failures(session_id): the kinds, whether this vehicle has their SIM_* parameters, the failsafe "
        "parameters and ArduCopter's measured reaction: that is what to expect. A failsafe whose enabling "
        "parameter is 0 does nothing: set_param(session_id, name, 1) it first (FS_GCS_ENABLE for gcs_loss).",
        f'inject_failure(session_id, kind="{kind}"); if its answer has a `warning`, set_param the parameter it '
        'names (e.g. FS_GCS_ENABLE 1 for gcs_loss). Then wait_until(condition="failsafe", timeout_s=55).',
        "snapshot(session_id): the mode it switched to (RTL, LAND, SmartRTL ...); compare with what list_failures "
        'expected. wait_until(condition="disarmed", timeout_s=55), repeated, until it is down.',
        f'clear_failure(session_id, kind="{kind}").',
        CLOSE + ".",
        LOG + '; log_messages(log_id, type="ERR") has the failsafe\'s subsystem and code. Report the reaction, '
        "its time after the injection and whether it matched the expectation.",
    )


def postmortem(log_id: str = "", session_id: str = "") -> str:
    """Read a flight's log afterwards: what happened, when, and why."""
    which = (
        f'log_id "{log_id}"'
        if log_id
        else f'list_logs(session_id="{session_id}")'
        if session_id
        else 'list_logs(limit=5) (the newest first; "live:<session_id>" reads a flight still in the air)'
    )
    return "A postmortem of a flight with sitlpool:\n" + _steps(
        f"Find the log: {which}.",
        "log_summary(log_id): duration, phases, modes with their times, max altitude and speeds, battery used, "
        "events, errors, failsafes and every MSG text with its log time.",
        'log_messages(log_id, type="ERR") and type="EV" and type="MODE": the sequence around the problem.',
        'log_fields(log_id, ["CTUN.Alt", "CTUN.DAlt", "BAT.Volt", "GPS.NSats"], t0=..., t1=...) a few seconds around '
        "each event; log_picture with the same fields to see it.",
        "Report: what happened, at which log time, the first sign of it, and the evidence (quote the log's values).",
    )


def ab_test(param: str = "WPNAV_SPEED", value_a: str = "500", value_b: str = "1000", runs: str = "5") -> str:
    """Compare two configurations over repeated flights, with statistics."""
    return f"A/B test of {param}={value_a} against {param}={value_b} with sitlpool:\n" + _steps(
        'Write the flight as steps (fly_steps\' format): e.g. [{"tool": "wait_until", "condition": "ready_to_arm", '
        '"timeout_s": 120}, {"tool": "set_mode", "mode": "GUIDED"}, {"tool": "arm"}, {"tool": "takeoff", '
        '"altitude_m": 10}, {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60}, '
        '{"tool": "goto", ...}, {"tool": "land"}, {"tool": "wait_until", "condition": "disarmed", "timeout_s": 120}].',
        f'batch_fly(variants={{"A": {{"params": {{"{param}": {value_a}}}}}, "B": {{"params": {{"{param}": '
        f"{value_b}}}}}}}, runs={runs}, steps=...): each run on a fresh SITL, interleaved.",
        "batch_status(batch_id) until its state is done (failed runs say why).",
        "batch_compare(batch_id): per metric each variant's mean and 95% CI, the test, the adjusted p-value and a "
        "verdict. Report the metrics that differ significantly, and say when the runs are too few to tell.",
        "For one pair of flights in detail: log_compare(log_a, log_b) on a log of each variant.",
    )


PROMPTS = (preflight, hop, mission, failsafe_test, postmortem, ab_test)


def register(mcp: MCPServer) -> None:
    for fn in PROMPTS:
        mcp.prompt(name=fn.__name__, description=(fn.__doc__ or "").strip())(fn)
