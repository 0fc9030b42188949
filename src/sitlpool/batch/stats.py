"""The comparison: per metric each variant's n, mean, spread and 95% CI; Welch's t-test for
continuous metrics and Fisher's exact test for pass/fail (every variant against the first,
the baseline); Benjamini-Hochberg across every test; the effect size; a verdict in words.
Every test is scipy's: nothing here is hand-rolled but the wording."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05


def describe(values: list[float]) -> dict:
    """n, mean, std (n-1), 95% CI of the mean (Student's t), min, max."""
    n = len(values)
    out: dict[str, Any] = {"n": n, "mean": None, "std": None, "ci95": None, "min": None, "max": None}
    if n == 0:
        return out
    a = np.asarray(values, dtype=float)
    mean = float(a.mean())
    out.update(mean=mean, min=float(a.min()), max=float(a.max()))
    if n >= 2:
        std = float(a.std(ddof=1))
        out["std"] = std
        if std == 0:
            out["ci95"] = [mean, mean]
        else:
            lo, hi = stats.t.interval(0.95, n - 1, loc=mean, scale=std / math.sqrt(n))
            out["ci95"] = [float(lo), float(hi)]
    return out


def hedges_g(a: list[float], b: list[float]) -> float | None:
    """Cohen's d of b against a with the pooled SD, times Hedges' small-sample correction."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    va, vb = np.var(a, ddof=1), np.var(b, ddof=1)
    pooled = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    diff = float(np.mean(b) - np.mean(a))
    if pooled == 0:  # no spread: an effect in SDs is 0 or undefined (JSON has no infinity)
        return 0.0 if diff == 0 else None
    return diff / pooled * (1 - 3 / (4 * (na + nb) - 9))


def welch(a: list[float], b: list[float]) -> tuple[float | None, str | None]:
    """Welch's t-test p-value (None with why, when it cannot be tested)."""
    if len(a) < 2 or len(b) < 2:
        return None, "fewer than 2 values in a variant"
    if np.var(a) == 0 and np.var(b) == 0:  # scipy gives nan
        if np.mean(a) == np.mean(b):
            return 1.0, "every run gave the same value"
        # a t-test needs spread; every run of each variant gave one value (a deterministic
        # vehicle): the difference is not chance, said as p 0 with why
        return 0.0, "no spread in either variant: every run gave the same value, the difference is exact"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return (None, "the test gave no p-value") if math.isnan(p) else (p, None)


def fisher(a: list[float], b: list[float]) -> float | None:
    if not a or not b:
        return None
    sa, sb = int(sum(1 for v in a if v)), int(sum(1 for v in b if v))
    return float(stats.fisher_exact([[sa, len(a) - sa], [sb, len(b) - sb]]).pvalue)


def _size_word(g: float | None) -> str:
    if g is None:
        return ""
    x = abs(g)
    return "negligible" if x < 0.2 else "small" if x < 0.5 else "medium" if x < 0.8 else "large"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def verdict(row: dict) -> str:
    m, base, other = row["metric"], row["baseline"], row["variant"]
    if row["p_value"] is None:
        return f"{m}: {other} vs {base} not tested ({row.get('note') or 'no values'})"
    ma, mb = row["mean_baseline"], row["mean_variant"]
    if row["kind"] == "binary":
        what = f"{other} passes {mb:.0%} vs {base} {ma:.0%}"
    else:
        diff = mb - ma
        if diff == 0:
            what = f"{other} equals {base} ({_fmt(mb)})"
        else:
            rel = f" ({diff / ma:+.0%})" if ma else ""
            direction = "higher" if diff > 0 else "lower"
            what = f"{other} is {_fmt(abs(diff))} {direction}{rel} than {base} ({_fmt(mb)} vs {_fmt(ma)})"
            if row.get("effect_size") is not None and math.isfinite(row["effect_size"]):
                what += f", effect {_size_word(row['effect_size'])} (g={row['effect_size']:.2f})"
    sig = "significant" if row["significant"] else "not significant"
    return f"{m}: {what}; {sig} (p={row['p_value']:.3g}, adjusted {row['p_adjusted']:.3g})"


def compare(values: dict[str, dict[str, list[float]]], kinds: dict[str, str], order: list[str]) -> dict:
    """``values[metric][variant]`` -> per-metric descriptions and one test row per metric and
    variant against the baseline (``order[0]``), BH-adjusted across all rows."""
    base = order[0]
    described = {m: {v: describe(values[m].get(v, [])) for v in order} for m in values}
    rows: list[dict] = []
    for m in values:
        kind = kinds[m]
        a = values[m].get(base, [])
        for other in order[1:]:
            b = values[m].get(other, [])
            note = None
            if kind == "binary":
                p = fisher(a, b)
                effect = (float(np.mean(b)) - float(np.mean(a))) if a and b else None
                test = "fisher_exact"
            else:
                p, note = welch(a, b)
                effect = hedges_g(a, b)
                test = "welch_t"
            rows.append(
                {
                    "metric": m,
                    "kind": kind,
                    "baseline": base,
                    "variant": other,
                    "test": test,
                    "n_baseline": len(a),
                    "n_variant": len(b),
                    "mean_baseline": float(np.mean(a)) if a else None,
                    "mean_variant": float(np.mean(b)) if b else None,
                    "effect_size": effect,
                    "effect_measure": "difference in pass rate" if kind == "binary" else "hedges_g",
                    "p_value": p,
                    "p_adjusted": None,
                    "significant": False,
                    "note": note,
                }
            )
    tested = [r for r in rows if r["p_value"] is not None]
    if tested:
        adj = stats.false_discovery_control([r["p_value"] for r in tested], method="bh")
        for r, q in zip(tested, adj, strict=True):
            r["p_adjusted"] = float(q)
            r["significant"] = bool(q < ALPHA)
    for r in rows:
        r["verdict"] = verdict(r)
    sig = [r for r in rows if r["significant"]]
    if sig:
        headline = "; ".join(r["verdict"] for r in sig)
    else:
        headline = f"no metric differs significantly between {', '.join(order)} (Benjamini-Hochberg, alpha {ALPHA})"
    return {"alpha": ALPHA, "baseline": base, "metrics": described, "tests": rows, "verdict": headline}
