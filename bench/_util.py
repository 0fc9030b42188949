"""Shared helpers of the bench scripts: timing statistics and a scratch directory."""

from __future__ import annotations

import statistics
import time


def stats(samples_s: list[float]) -> str:
    """``median X, p99 Y`` in the best unit."""
    xs = sorted(samples_s)
    med = statistics.median(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return f"median {fmt(med)}, p99 {fmt(p99)} (n={len(xs)})"


def fmt(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.3f} s"


def timeit(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def report(name: str, value: str, target: str = "") -> None:
    print(f"{name:<58} {value}" + (f"   [target {target}]" if target else ""), flush=True)
