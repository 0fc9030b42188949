"""Step programs on sim time (issue 24): a step is an MCP flight tool and its arguments,
``{"tool": "takeoff", "altitude_m": 10}``, or ``{"hold_s": N}`` (N seconds of sim time); the
session is implied. Steps are timed on the vehicle's clock (its time_boot_ms)::

    from sitlpool import steps
    steps.validate_steps(program)                       # StepError: one line, the bad step
    result = steps.fly(program, speedup=10)             # a SITL of its own, blocking: RunResult
    result = steps.run_steps(session, program, time_limit_s=120, abort=event)  # an open session
    again = steps.repro(run_id=result.run_id)           # fly it again; again.comparison

Every ``fly``/``fly_steps`` run writes ``<data_dir>/runs/<run_id>/recipe.json`` (binary and its
SHA-256, model, home, speedup, parameters, parameter files by hash, seeds, steps with sim
times) and ``run.json`` (the result)."""

from .recipe import read_param_file, sha256_file
from .runner import Runner, RunResult, StepOutcome, run_steps
from .runs import Run, StepRuns, UnknownRun, compare_runs, fly, repro, runs_for
from .session_recipes import record_handle, record_session
from .vocabulary import MAX_STEPS, TOOLS, StepError, Tool, validate_steps

__all__ = [
    "MAX_STEPS",
    "TOOLS",
    "Run",
    "RunResult",
    "Runner",
    "StepError",
    "StepOutcome",
    "StepRuns",
    "Tool",
    "UnknownRun",
    "compare_runs",
    "record_handle",
    "record_session",
    "fly",
    "read_param_file",
    "repro",
    "run_steps",
    "runs_for",
    "sha256_file",
    "validate_steps",
]
