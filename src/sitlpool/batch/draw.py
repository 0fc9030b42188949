"""The comparison as a picture (Pillow): one panel per metric, each variant's runs as dots
side by side with its mean and 95% CI; pass/fail metrics as the pass rate."""

from __future__ import annotations

import io
import math

from PIL import Image, ImageDraw, ImageFont

PANEL_W, PANEL_H, COLS = 300, 210, 3
COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]
MARGIN_L, MARGIN_B, MARGIN_T = 46, 26, 34


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _panel(
    d: ImageDraw.ImageDraw,
    x0: int,
    y0: int,
    metric: str,
    kind: str,
    per: dict,
    desc: dict,
    order: list[str],
    row: dict | None,
    font,
) -> None:
    d.rectangle([x0 + 2, y0 + 2, x0 + PANEL_W - 2, y0 + PANEL_H - 2], outline=(200, 200, 200))
    title = metric
    if row is not None and row.get("p_adjusted") is not None:
        title += f"  p_adj={row['p_adjusted']:.2g}" + (" *" if row["significant"] else "")
    d.text((x0 + 8, y0 + 6), title, fill=(0, 0, 0), font=font)
    vals = [v for name in order for v in per.get(name, [])]
    if kind == "binary":
        lo, hi = 0.0, 1.0
    elif not vals:
        d.text((x0 + 8, y0 + PANEL_H // 2), "no values", fill=(120, 120, 120), font=font)
        return
    else:
        lo, hi = min(vals), max(vals)
        for name in order:
            ci = desc.get(name, {}).get("ci95")
            if ci:
                lo, hi = min(lo, ci[0]), max(hi, ci[1])
        if hi - lo < 1e-9:
            lo, hi = lo - 1, hi + 1
        pad = (hi - lo) * 0.08
        lo, hi = lo - pad, hi + pad
    top, bottom = y0 + MARGIN_T, y0 + PANEL_H - MARGIN_B
    left, right = x0 + MARGIN_L, x0 + PANEL_W - 10

    def y(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    d.line([left, top, left, bottom], fill=(0, 0, 0))
    for v in (lo, (lo + hi) / 2, hi):
        d.text((x0 + 4, y(v) - 5), _fmt(v), fill=(80, 80, 80), font=font)
    slot = (right - left) / max(1, len(order))
    for i, name in enumerate(order):
        colour = COLOURS[i % len(COLOURS)]
        cx = left + slot * (i + 0.5)
        d.text((cx - 4 * len(name) / 2 - 2, bottom + 6), name, fill=colour, font=font)
        xs = per.get(name, [])
        if kind == "binary":
            rate = sum(xs) / len(xs) if xs else 0.0
            d.rectangle([cx - slot * 0.25, y(rate), cx + slot * 0.25, bottom], fill=colour)
            d.text((cx - 12, y(rate) - 12), f"{rate:.0%}", fill=(0, 0, 0), font=font)
            continue
        for j, v in enumerate(xs):  # a deterministic jitter: the same batch draws the same picture
            jx = cx + (((j * 37) % 17) / 16 - 0.5) * slot * 0.5
            d.ellipse([jx - 2.5, y(v) - 2.5, jx + 2.5, y(v) + 2.5], fill=colour)
        dd = desc.get(name, {})
        if dd.get("mean") is not None:
            m = dd["mean"]
            d.line([cx - slot * 0.35, y(m), cx + slot * 0.35, y(m)], fill=(0, 0, 0), width=2)
            if dd.get("ci95"):
                a, b = dd["ci95"]
                d.line([cx + slot * 0.38, y(a), cx + slot * 0.38, y(b)], fill=(0, 0, 0), width=1)


def comparison_png(
    compared: dict, values: dict[str, dict[str, list[float]]], kinds: dict[str, str], order: list[str], title: str
) -> bytes:
    metrics = list(values)
    rows_n = max(1, math.ceil(len(metrics) / COLS))
    img = Image.new("RGB", (PANEL_W * COLS, PANEL_H * rows_n + 30), "white")
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    d.text((8, 8), title, fill=(0, 0, 0), font=font)
    first: dict[str, dict] = {}
    for r in compared["tests"]:
        first.setdefault(r["metric"], r)
    for k, m in enumerate(metrics):
        x0, y0 = (k % COLS) * PANEL_W, 30 + (k // COLS) * PANEL_H
        _panel(d, x0, y0, m, kinds[m], values[m], compared["metrics"].get(m, {}), order, first.get(m), font)
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()
