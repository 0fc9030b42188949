"""The batch comparison's statistics on fixed numbers, against scipy called directly: the
means, CIs, Welch's t-test, Fisher's exact test, Benjamini-Hochberg and Hedges' g that
batch_compare reports are scipy's own, and every test row carries p_value, p_adjusted and
significant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sitlpool.batch import compare, describe, fisher, hedges_g, welch

A = [4.84, 4.93, 4.91, 4.88, 4.95, 4.90]
B = [9.27, 9.31, 9.30, 9.35, 9.29, 9.33]
C = [4.86, 4.92, 4.90, 4.87, 4.96, 4.89]


def test_describe_is_the_t_interval():
    d = describe(A)
    n, m, s = len(A), float(np.mean(A)), float(np.std(A, ddof=1))
    lo, hi = stats.t.interval(0.95, n - 1, loc=m, scale=s / math.sqrt(n))
    assert d["n"] == n and d["mean"] == pytest.approx(m) and d["std"] == pytest.approx(s)
    assert d["ci95"] == pytest.approx([lo, hi])
    assert describe([])["mean"] is None and describe([3.0])["ci95"] is None


def test_welch_and_fisher_are_scipys():
    p, note = welch(A, B)
    assert note is None
    assert p == pytest.approx(stats.ttest_ind(A, B, equal_var=False).pvalue)
    assert welch(A, C)[0] == pytest.approx(stats.ttest_ind(A, C, equal_var=False).pvalue)
    a, b = [1.0] * 9 + [0.0], [1.0] * 2 + [0.0] * 8
    assert fisher(a, b) == pytest.approx(stats.fisher_exact([[9, 1], [2, 8]]).pvalue)


def test_hedges_g_on_fixed_numbers():
    na, nb = len(A), len(B)
    pooled = math.sqrt(((na - 1) * np.var(A, ddof=1) + (nb - 1) * np.var(B, ddof=1)) / (na + nb - 2))
    d = (np.mean(B) - np.mean(A)) / pooled
    assert hedges_g(A, B) == pytest.approx(d * (1 - 3 / (4 * (na + nb) - 9)))
    assert hedges_g([1.0], B) is None
    assert hedges_g([2.0, 2.0], [2.0, 2.0]) == 0.0 and hedges_g([2.0, 2.0], [3.0, 3.0]) is None


def test_no_spread_is_said_not_tested():
    assert welch([2.0, 2.0, 2.0], [2.0, 2.0]) == (1.0, "every run gave the same value")
    p, note = welch([2.0, 2.0], [3.0, 3.0])  # a deterministic vehicle: the difference is exact
    assert p == 0.0 and "no spread" in note
    assert welch([1.0], [2.0, 3.0])[0] is None


def test_compare_adjusts_across_metrics_with_bh():
    values = {
        "success": {"A": [1.0] * 6, "B": [1.0] * 5 + [0.0]},
        "time_to_alt_s": {"A": A, "B": B},
        "max_alt_m": {"A": A, "B": C},
    }
    kinds = {"success": "binary", "time_to_alt_s": "continuous", "max_alt_m": "continuous"}
    out = compare(values, kinds, ["A", "B"])
    rows = {r["metric"]: r for r in out["tests"]}
    raw = [rows[m]["p_value"] for m in values]
    adjusted = stats.false_discovery_control(raw, method="bh")
    for m, q in zip(values, adjusted, strict=True):
        r = rows[m]
        assert set(r) >= {"p_value", "p_adjusted", "significant", "effect_size", "verdict"}
        assert r["p_adjusted"] == pytest.approx(q)
        assert r["significant"] is bool(q < 0.05)
    assert rows["time_to_alt_s"]["significant"] and not rows["max_alt_m"]["significant"]
    assert not rows["success"]["significant"] and rows["success"]["test"] == "fisher_exact"
    assert "time_to_alt_s: B is" in out["verdict"] and "higher" in out["verdict"]
    assert out["metrics"]["time_to_alt_s"]["B"]["n"] == 6


def test_three_variants_each_against_the_first():
    out = compare({"m": {"A": A, "B": B, "C": C}}, {"m": "continuous"}, ["A", "B", "C"])
    assert [(r["baseline"], r["variant"]) for r in out["tests"]] == [("A", "B"), ("A", "C")]
    assert [r["significant"] for r in out["tests"]] == [True, False]
