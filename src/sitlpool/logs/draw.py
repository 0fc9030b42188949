"""A picture (PNG) of chosen log fields over time, one panel per field, with the flight
modes as coloured bands and arming/disarming marked: the style of ``sitlpool.picture``'s
flight picture (same colours and layout rules). That module sits above ``process`` in the
layers and this one below it, so the few drawing helpers are repeated here, not imported."""

from __future__ import annotations

import io
import math
import os

from .reader import LogError, LogReader
from .series import fields as read_fields
from .summary import _FIRMWARE
from .tables import MODE_TABLES, VEHICLES

W = 1100
PANEL_H, TOP, BOTTOM, LEFT, RIGHT, GAP = 150, 60, 46, 70, 18, 34
INK, GRID, LINE = (30, 30, 30), (225, 225, 225), (31, 119, 180)
START, END, MODE_LINE = (44, 160, 44), (214, 39, 40), (150, 150, 150)
MODE_COLOURS = [
    (235, 242, 250),
    (250, 240, 225),
    (232, 245, 232),
    (245, 232, 245),
    (250, 250, 220),
    (230, 245, 245),
    (245, 235, 235),
    (238, 238, 238),
]
MAX_FIELDS = 8
_fonts: dict = {}


def _font(size: int):
    f = _fonts.get(size)
    if f is None:
        from PIL import ImageFont  # Pillow on first use: importing sitlpool.logs stays fast

        try:
            f = ImageFont.load_default(size=size)
        except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
            f = ImageFont.load_default()
        _fonts[size] = f
    return f


def _ticks(lo: float, hi: float, want: int = 6) -> list[float]:
    if not hi > lo:
        hi = lo + 1
    raw = (hi - lo) / want
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.2g}"


def _events(path) -> tuple[list[tuple[float, str]], list[tuple[float, bool]]]:
    """Mode changes ``(t, name)`` and arming changes ``(t, armed)``: one light pass."""
    vehicle = None
    modes: list[tuple[float, int]] = []
    arms: list[tuple[float, bool]] = []
    for f, v in LogReader(path).messages(["MODE", "VER", "MSG", "ARM"]):
        t = v[0] / 1e6
        if f.name == "MODE":
            modes.append((t, v[f.columns.index("ModeNum")] if "ModeNum" in f.columns else v[1]))
        elif f.name == "ARM":
            arms.append((t, bool(v[1])))
        elif f.name == "VER" and "BU" in f.columns:
            vehicle = VEHICLES.get(v[f.columns.index("BU")], vehicle)
        elif f.name == "MSG" and vehicle is None and _FIRMWARE.match(v[1]):
            vehicle = v[1].split()[0]
    table = MODE_TABLES.get(vehicle or "", {})
    return [(t, table.get(n, f"mode {n}")) for t, n in modes], arms


def picture(
    path: str | os.PathLike,
    fields,
    t0: float | None = None,
    t1: float | None = None,
    title: str = "",
    max_points: int = 1000,
) -> bytes:
    """PNG bytes: each of ``fields`` (``TYPE.Field`` names, at most 8) over log time
    ``t0..t1`` (s), downsampled keeping peaks, on the flight modes as bands, arm/disarm marked.
    Raises what ``fields()`` raises (unknown names, a range outside the log, ...)."""
    from PIL import Image, ImageDraw  # Pillow on first use: importing sitlpool.logs stays fast

    names = [n for n in fields.replace(",", " ").split()] if isinstance(fields, str) else list(fields)
    if len(names) > MAX_FIELDS:
        raise LogError(f"at most {MAX_FIELDS} fields in one picture, not {len(names)}")
    data = read_fields(path, names, t0, t1, max_points)
    modes, arms = _events(path)
    series = data["fields"]
    ts = [t for s in series.values() for t in s["t"]]
    a = t0 if t0 is not None else (min(ts) if ts else 0.0)
    b = t1 if t1 is not None else (max(ts) if ts else a + 1)
    if not b > a:
        b = a + 1.0
    h = TOP + len(series) * (PANEL_H + GAP) - GAP + BOTTOM
    img = Image.new("RGB", (W, h), "white")
    d = ImageDraw.Draw(img)
    f11, f12 = _font(11), _font(12)
    name = os.path.basename(str(path))
    d.text((8, 6), title or f"{name}: {', '.join(series)} ({a:.1f}-{b:.1f} s log time)", fill=INK, font=_font(14))
    x0, x1 = LEFT, W - RIGHT

    def px(t: float) -> float:
        return x0 + (t - a) / (b - a) * (x1 - x0)

    colour: dict[str, tuple] = {}
    bands = []
    for i, (tm, mname) in enumerate(modes):
        te = modes[i + 1][0] if i + 1 < len(modes) else b
        if te < a or tm > b:
            continue
        c = colour.setdefault(mname, MODE_COLOURS[len(colour) % len(MODE_COLOURS)])
        bands.append((px(max(tm, a)), px(min(te, b)), c, mname, tm >= a))
    label_end = -1e9
    for xa, _xb, _c, mname, _starts in bands:  # mode names above the first panel
        if xa >= label_end:
            d.text((xa + 2, TOP - 16), mname, fill=INK, font=f11)
            label_end = xa + 2 + d.textlength(mname, font=f11) + 6
    for k, (key, s) in enumerate(series.items()):
        y0 = TOP + k * (PANEL_H + GAP)
        y1 = y0 + PANEL_H
        for xa, xb, c, _m, starts in bands:
            d.rectangle((xa, y0, max(xa, xb), y1), fill=c)
            if starts:
                d.line([(xa, y0), (xa, y1)], fill=MODE_LINE)
        vs = s["v"]
        lo, hi = (min(vs), max(vs)) if vs else (0.0, 1.0)
        if not hi > lo:
            lo, hi = lo - 0.5, hi + 0.5
        pad = 0.06 * (hi - lo)
        lo, hi = lo - pad, hi + pad

        def py(v: float, lo=lo, hi=hi, y0=y0, y1=y1) -> float:
            return y1 - (v - lo) / (hi - lo) * (y1 - y0)

        for t in _ticks(lo, hi, 4):
            d.line([(x0, py(t)), (x1, py(t))], fill=GRID)
            d.text((x0 - 5, py(t)), _fmt(t), fill=INK, font=f12, anchor="rm")
        for t in _ticks(a, b, 8):
            d.line([(px(t), y0), (px(t), y1)], fill=GRID)
            if k == len(series) - 1:
                d.text((px(t), y1 + 4), _fmt(t), fill=INK, font=f12, anchor="mt")
        pts = [(px(t), py(v)) for t, v in zip(s["t"], vs)]
        if len(pts) > 1:
            d.line(pts, fill=LINE, width=2)
        elif pts:
            d.ellipse((pts[0][0] - 2, pts[0][1] - 2, pts[0][0] + 2, pts[0][1] + 2), fill=LINE)
        else:
            d.text(((x0 + x1) / 2, (y0 + y1) / 2), "no data in this range", fill=INK, font=f12, anchor="mm")
        for t, armed in arms:
            if a <= t <= b:
                x = px(t)
                col = START if armed else END
                d.polygon(
                    [(x, y1 - 10), (x - 5, y1), (x + 5, y1)]
                    if armed
                    else [(x, y1), (x - 5, y1 - 10), (x + 5, y1 - 10)],
                    fill=col,
                )
        d.rectangle((x0, y0, x1, y1), outline=INK)
        unit = f" ({s['unit']})" if s["unit"] else ""
        d.text((x0 + 4, y0 + 3), f"{key}{unit}", fill=INK, font=f12)
    d.text(((x0 + x1) / 2, h - 20), "log time (s since boot)", fill=INK, font=f12, anchor="mt")
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()
