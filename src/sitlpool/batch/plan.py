"""What a batch will fly: the variants checked (each one clear line when wrong), their
launch options, and the runs shuffled and interleaved so load hits every variant alike."""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SitlpoolError
from ..process.paramfiles import check_param_name
from ..steps import read_param_file

MAX_RUNS = 1000  # per variant: 1000 x 60 sim-s at speedup 10 is ~2 h on 8 slots
MAX_VARIANTS = 26
VARIANT_KEYS = ("params", "param_files", "binary", "wind_seed", "failure_seed", "model", "home", "speedup")
SEED_PARAMS = {"wind_seed": "SIM_WIND_SEED", "failure_seed": "SIM_FAIL_SEED"}


class BatchError(SitlpoolError):
    """A batch that cannot be flown or read, said in one line."""


@dataclass
class Variant:
    name: str
    params: dict[str, float] = field(default_factory=dict)
    param_files: list[dict] = field(default_factory=list)  # {"path", "sha256"}
    binary: str | None = None
    seed_param: str | None = None
    seeds: list[int] = field(default_factory=list)  # one per run, cycled
    model: str | None = None
    home: str | None = None
    speedup: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Run:
    index: int  # position in the flying order
    variant: str
    run: int  # 0..runs-1 within its variant
    seed: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def open_options(v: Variant, run: Run, base: dict) -> dict:
    """The launch options of one run: the variant's over the batch's (``base``), its seed as the
    variant's seed parameter."""
    params = dict(v.params)
    if v.seed_param is not None and run.seed is not None:
        params[v.seed_param] = float(run.seed)
    return {
        "model": v.model or base["model"],
        "speedup": v.speedup or base["speedup"],
        "home": v.home or base["home"],
        "params": params or None,
    }


def check_runs(runs: Any) -> int:
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise BatchError(f"runs must be a whole number from 1 to {MAX_RUNS} per variant, not {runs!r}")
    return runs


def _check_params(name: str, params: Any) -> dict[str, float]:
    if not isinstance(params, dict):
        raise BatchError(f"variant {name}: params must be an object of NAME: number, not {type(params).__name__}")
    out = {}
    for k, v in params.items():
        if not isinstance(k, str) or not k or isinstance(v, bool) or not isinstance(v, int | float):
            raise BatchError(f"variant {name}: parameter {k!r} = {v!r}: give a name and a number")
        if not math.isfinite(v):
            raise BatchError(f"variant {name}: parameter {k} = {v!r} is not a finite number")
        try:
            out[check_param_name(k)] = float(v)
        except ConfigError as e:
            raise BatchError(f"variant {name}: {e}") from None
    return out


def _seed_range(name: str, key: str, value: Any) -> list[int]:
    """``[first, last]`` (inclusive) or a list of seeds or one seed."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    ok = (
        isinstance(value, list | tuple) and value and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    )
    if not ok:
        raise BatchError(f"variant {name}: {key} is [first, last] (whole numbers) or one seed, not {value!r}")
    if len(value) == 2 and value[1] >= value[0]:
        if value[1] - value[0] >= 100000:
            raise BatchError(f"variant {name}: {key} range {value} is too wide (at most 100000 seeds)")
        return list(range(value[0], value[1] + 1))
    return list(value)


def check_variant(name: Any, spec: Any) -> Variant:
    if not isinstance(name, str) or not name.strip() or len(name) > 40 or not name.isprintable():
        raise BatchError(f"a variant's name must be a short printable text, not {name!r}")
    if not isinstance(spec, dict):
        raise BatchError(f"variant {name} must be an object such as {{'params': {{...}}}}, not {spec!r}")
    unknown = sorted(set(spec) - set(VARIANT_KEYS))
    if unknown:
        raise BatchError(
            f"variant {name}: unknown key(s) {', '.join(unknown)}; a variant has {', '.join(VARIANT_KEYS)}"
        )
    v = Variant(name)
    files = spec.get("param_files") or []
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise BatchError(f"variant {name}: param_files is a list of file paths, not {files!r}")
    for f in files:
        got = read_param_file(Path(f).expanduser())
        v.params.update(got["values"])
        v.param_files.append({"path": str(Path(got["path"]).resolve()), "sha256": got["sha256"]})
    v.params.update(_check_params(name, spec.get("params") or {}))  # explicit params win over the files
    if spec.get("binary") is not None:
        b = Path(os.path.expanduser(str(spec["binary"])))
        if not b.is_file() or not os.access(b, os.X_OK):
            why = "does not exist" if not b.exists() else "is not an executable file"
            raise BatchError(f"variant {name}: binary {b} {why}; give the path of an ArduPilot SITL build")
        v.binary = str(b.resolve())
    for key, param in SEED_PARAMS.items():
        if spec.get(key) is not None:
            if v.seed_param is not None:
                raise BatchError(f"variant {name}: give wind_seed or failure_seed, not both")
            v.seed_param, v.seeds = param, _seed_range(name, key, spec[key])
    for key in ("model", "home"):
        if spec.get(key) is not None:
            if not isinstance(spec[key], str):
                raise BatchError(f"variant {name}: {key} is a text, not {spec[key]!r}")
            setattr(v, key, spec[key])
    if spec.get("speedup") is not None:
        s = spec["speedup"]
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 < s <= 100:
            raise BatchError(f"variant {name}: speedup is a number above 0 and at most 100, not {s!r}")
        v.speedup = float(s)
    return v


def _identity(v: Variant) -> str:
    d = v.as_dict()
    d.pop("name")
    d["param_files"] = sorted(f["sha256"] for f in v.param_files)
    d.pop("param_files")  # their values are in params already: the same values are the same variant
    return json.dumps(d, sort_keys=True)


def check_variants(variants: Any) -> list[Variant]:
    if not isinstance(variants, dict) or not variants:
        raise BatchError(
            "variants is an object of name: {params|param_files|binary|wind_seed...}, e.g. "
            "{'A': {'params': {'WPNAV_SPEED_UP': 250}}, 'B': {'params': {'WPNAV_SPEED_UP': 100}}}"
        )
    if len(variants) > MAX_VARIANTS:
        raise BatchError(f"{len(variants)} variants: at most {MAX_VARIANTS}")
    out = [check_variant(k, s) for k, s in variants.items()]
    seen: dict[str, str] = {}
    for v in out:
        key = _identity(v)
        if key in seen:
            raise BatchError(
                f"variants {seen[key]} and {v.name} differ in nothing (same parameters, files, binary and seeds): "
                "a comparison needs them to differ"
            )
        seen[key] = v.name
    return out


def plan(variants: list[Variant], runs: int, seed: int | None) -> list[Run]:
    """Every variant's runs, in rounds (one run of each variant per round, the round's order
    shuffled) so that load drifting during the batch falls on every variant alike."""
    rng = random.Random(seed)
    order: list[Run] = []
    for r in range(runs):
        names = [v.name for v in variants]
        rng.shuffle(names)
        for name in names:
            order.append(Run(len(order), name, r))
    by_name = {v.name: v for v in variants}
    for run in order:
        v = by_name[run.variant]
        if v.seeds:
            run.seed = v.seeds[run.run % len(v.seeds)]
    return order
