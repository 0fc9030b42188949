"""Two logs' summaries side by side, with the differences named."""

from __future__ import annotations

import os

from .summary import summary

# (key in the comparison, how to get it from a summary, tolerance: relative, absolute)
_NUMBERS = (
    ("duration", lambda s: s["duration"], 0.05, 1.0),
    ("max altitude", lambda s: s["altitude"]["max"], 0.05, 0.5),
    ("min altitude", lambda s: s["altitude"]["min"], 0.05, 0.5),
    ("max horizontal speed", lambda s: s["speed"]["max_horizontal"], 0.1, 0.5),
    ("max climb rate", lambda s: s["speed"]["max_climb"], 0.1, 0.3),
    ("max descent rate", lambda s: s["speed"]["max_descent"], 0.1, 0.3),
    ("distance flown", lambda s: s["distance_m"], 0.1, 2.0),
    ("battery used (mAh)", lambda s: s["battery"].get("used_mah"), 0.1, 20.0),
    ("flights (arm to disarm)", lambda s: len(s["arming"]), 0.0, 0.0),
)
_SEQUENCES = (
    ("modes", lambda s: [m["mode"] for m in s["modes"]]),
    ("phases", lambda s: [p["phase"] for p in s["phases"]]),
    ("events", lambda s: [e["name"] for e in s["events"]]),
    ("errors", lambda s: [e["text"] for e in s["errors"]]),
    ("failsafes", lambda s: [f["text"] for f in s["failsafes"]]),
)
_WORDS = (("vehicle", "vehicle"), ("firmware", "firmware"), ("log end", "end"))


def _num_diff(what: str, x, y, rel: float, ab: float) -> dict | None:
    if x is None or y is None:
        return None if x is y else {"what": what, "a": x, "b": y, "text": f"{what}: {x} vs {y}"}
    if abs(x - y) <= max(ab, rel * max(abs(x), abs(y))):
        return None
    d = y - x
    return {"what": what, "a": x, "b": y, "text": f"{what}: {x:g} vs {y:g} ({d:+g})"}


def _seq_diff(what: str, x: list, y: list) -> dict | None:
    if x == y:
        return None
    i = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    pa = x[i] if i < len(x) else "(nothing)"
    pb = y[i] if i < len(y) else "(nothing)"
    only_a = sorted(set(x) - set(y))
    only_b = sorted(set(y) - set(x))
    extra = []
    if only_a:
        extra.append(f"only in A: {', '.join(map(str, only_a))}")
    if only_b:
        extra.append(f"only in B: {', '.join(map(str, only_b))}")
    text = f"{what}: {len(x)} vs {len(y)}, first difference at #{i + 1}: {pa} vs {pb}"
    return {"what": what, "a": x, "b": y, "text": text + (f" ({'; '.join(extra)})" if extra else "")}


def compare_summaries(a: dict, b: dict) -> dict:
    """``{"a": ..., "b": ..., "side_by_side": {what: [a, b]}, "differences": [{"what", "a", "b",
    "text"}], "same": [what, ...]}``: numbers differ beyond a stated tolerance (duration 5%
    or 1 s, altitude 5% or 0.5 m, ...), sequences (modes, phases, events, errors,
    failsafes) differ in order or content."""
    diffs: list[dict] = []
    same: list[str] = []
    side: dict[str, list] = {}
    for what, key in _WORDS:
        x, y = a.get(key), b.get(key)
        if key == "end":
            x, y = (x or {}).get("status"), (y or {}).get("status")
        side[what] = [x, y]
        if x != y:
            diffs.append({"what": what, "a": x, "b": y, "text": f"{what}: {x} vs {y}"})
        else:
            same.append(what)
    for what, get, rel, ab in _NUMBERS:
        x, y = get(a), get(b)
        side[what] = [x, y]
        d = _num_diff(what, x, y, rel, ab)
        (diffs.append(d) if d else same.append(what))  # type: ignore[func-returns-value]
    for what, get in _SEQUENCES:
        x, y = get(a), get(b)
        side[what] = [x, y]
        d = _seq_diff(what, x, y)
        (diffs.append(d) if d else same.append(what))  # type: ignore[func-returns-value]
    return {"a": a, "b": b, "side_by_side": side, "differences": diffs, "same": same}


def compare(a: str | os.PathLike, b: str | os.PathLike) -> dict:
    """Summaries of two logs side by side with the differences named (``compare_summaries``).
    The two summaries keep their ``messages`` lists out of the result's ``a``/``b`` (counts
    instead) to keep the answer short; ``summary(path)`` gives them."""
    sa, sb = summary(a), summary(b)
    out = compare_summaries(sa, sb)
    for s in (out["a"], out["b"]):
        s["messages"] = len(s["messages"])
    return out
