"""A picture of a flight (PNG): the ground track in metres north/east of home with the
mission's waypoints, and altitude over time with mode changes and arm/disarm marked.

Drawn with Pillow, imported on first use (~15 ms that the MCP server, which imports this
module, does not spend at start): matplotlib takes ~0.3 s per figure and over a second to
import, Pillow draws a 10-minute flight in a few milliseconds. Input is what a
``FlightRecorder`` kept, so the MCP tool and the pytest plugin draw the same picture.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from .mavlink.recorder import recorder_for

EARTH_R = 6378137.0
W, H = 1100, 520
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 62, 18, 72, 46
GAP = 70
TRACK_W = 430  # the ground track panel's plot width (square)
INK, GRID, TRACK, ALT = (30, 30, 30), (225, 225, 225), (31, 119, 180), (31, 119, 180)
WAYPOINT, HOME, START, END = (230, 120, 20), (0, 0, 0), (44, 160, 44), (214, 39, 40)
MODE_LINE = (150, 150, 150)
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

_fonts: dict = {}


def _font(size: int):
    f = _fonts.get(size)
    if f is None:
        from PIL import ImageFont  # Pillow on first use (see the module's docstring)

        try:
            f = ImageFont.load_default(size=size)
        except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
            f = ImageFont.load_default()
        _fonts[size] = f
    return f


def local_ne(lat: float, lon: float, home: tuple[float, float]) -> tuple[float, float]:
    """Metres north and east of ``home`` (flat Earth: fine for a SITL flight's few km)."""
    n = math.radians(lat - home[0]) * EARTH_R
    e = math.radians(lon - home[1]) * EARTH_R * math.cos(math.radians(home[0]))
    return n, e


def nice_ticks(lo: float, hi: float, want: int = 6) -> list[float]:
    if not hi > lo:
        hi = lo + 1
    raw = (hi - lo) / want
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.1f}"


class _Panel:
    """A plot box with data limits: maps data to pixels and draws axes, ticks and grid."""

    def __init__(self, draw, box, xlim, ylim):
        self.d, self.box, self.xlim, self.ylim = draw, box, xlim, ylim

    def px(self, x: float, y: float) -> tuple[float, float]:
        x0, y0, x1, y1 = self.box
        (a, b), (c, e) = self.xlim, self.ylim
        return x0 + (x - a) / (b - a) * (x1 - x0), y1 - (y - c) / (e - c) * (y1 - y0)

    def many(self, xs, ys) -> list[tuple[float, float]]:
        """``px`` for whole lines (thousands of points: the factors are worked out once)."""
        x0, y0, x1, y1 = self.box
        (a, b), (c, e) = self.xlim, self.ylim
        sx, sy = (x1 - x0) / (b - a), (y1 - y0) / (e - c)
        return [(x0 + (x - a) * sx, y1 - (y - c) * sy) for x, y in zip(xs, ys)]

    def axes(self, xlabel: str, ylabel: str, title: str) -> None:
        x0, y0, x1, y1 = self.box
        f = _font(12)
        for t in nice_ticks(self.xlim[0], self.xlim[1], 7):
            x, _ = self.px(t, 0)
            self.d.line([(x, y0), (x, y1)], fill=GRID)
            self.d.text((x, y1 + 4), _fmt(t), fill=INK, font=f, anchor="mt")
        for t in nice_ticks(self.ylim[0], self.ylim[1], 6):
            _, y = self.px(0, t)
            self.d.line([(x0, y), (x1, y)], fill=GRID)
            self.d.text((x0 - 5, y), _fmt(t), fill=INK, font=f, anchor="rm")
        self.d.rectangle(self.box, outline=INK)
        self.d.text(((x0 + x1) / 2, y1 + 22), xlabel, fill=INK, font=f, anchor="mt")
        if ylabel:
            self.d.text((x0 - 5, y0 - 8), ylabel, fill=INK, font=f, anchor="rb")
        if title:
            self.d.text(((x0 + x1) / 2, y0 - 24), title, fill=INK, font=_font(14), anchor="mb")


def _limits(vals: list[float], pad: float = 0.08, minimum: float = 10.0) -> tuple[float, float]:
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, minimum)
    mid = (lo + hi) / 2
    return mid - span / 2 * (1 + pad), mid + span / 2 * (1 + pad)


def render(
    points: list[tuple], events: list[tuple], waypoints: list[tuple], home: tuple | None, title: str = ""
) -> bytes:
    """PNG bytes. ``points``: (t, lat, lon, rel_alt m, ...); ``events``: (t, kind, text) with
    kind mode/armed/disarmed; ``waypoints``: (item number, lat, lon); ``home``: (lat, lon, ...)."""
    from PIL import Image, ImageDraw  # Pillow on first use (see the module's docstring)

    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.text((8, 6), title, fill=INK, font=_font(14))
    if not points:
        d.text(
            (W / 2, H / 2),
            "no positions recorded yet (the vehicle has not reported GLOBAL_POSITION_INT)",
            fill=INK,
            font=_font(14),
            anchor="mm",
        )
        return _png(img)
    if home is None:
        home = (points[0][1], points[0][2])
    kn = math.radians(1) * EARTH_R
    ke = kn * math.cos(math.radians(home[0]))
    ne = [((p[1] - home[0]) * kn, (p[2] - home[1]) * ke) for p in points]
    wps = [(n, *local_ne(lat, lon, home)) for n, lat, lon in waypoints]
    _ground(d, ne, wps)
    _altitude(d, points, events)
    return _png(img)


def _ground(d, ne: list[tuple[float, float]], wps: list[tuple]) -> None:
    norths = [n for n, _ in ne] + [w[1] for w in wps] + [0.0]
    easts = [e for _, e in ne] + [w[2] for w in wps] + [0.0]
    xlim, ylim = _limits(easts), _limits(norths)
    span = max(xlim[1] - xlim[0], ylim[1] - ylim[0])  # equal scale on both axes
    xm, ym = sum(xlim) / 2, sum(ylim) / 2
    box = (MARGIN_L, MARGIN_T, MARGIN_L + TRACK_W, H - MARGIN_B)
    # the box is not square: widen the limits of the longer side
    bw, bh = box[2] - box[0], box[3] - box[1]
    sx, sy = (span * bw / bh, span) if bw >= bh else (span, span * bh / bw)
    p = _Panel(d, box, (xm - sx / 2, xm + sx / 2), (ym - sy / 2, ym + sy / 2))
    p.axes("east of home (m)", "north (m)", "ground track")
    f = _font(11)
    if len(wps) > 1:
        d.line([p.px(e, n) for _, n, e in wps], fill=WAYPOINT, width=1)
    xy = p.many([e for _, e in ne], [n for n, _ in ne])
    if len(xy) > 1:
        d.line(xy, fill=TRACK, width=2)
    hx, hy = p.px(0, 0)
    d.rectangle((hx - 5, hy - 5, hx + 5, hy + 5), outline=HOME, width=2)
    d.text((hx + 8, hy + 6), "home", fill=HOME, font=f)
    for (x, y), col in ((xy[0], START), (xy[-1], END)):
        d.ellipse((x - 4, y - 4, x + 4, y + 4), fill=col)
    for num, n, e in wps:  # on top: a waypoint reached hides the end of the track, not the other way round
        x, y = p.px(e, n)
        d.ellipse((x - 8, y - 8, x + 8, y + 8), outline=WAYPOINT, width=2, fill="white")
        d.text((x, y), str(num), fill=WAYPOINT, font=f, anchor="mm")


def _altitude(d, points: list[tuple], events: list[tuple]) -> None:
    t0 = points[0][0]
    ts = [p[0] - t0 for p in points]
    alts = [p[3] for p in points]
    x0 = MARGIN_L + TRACK_W + GAP
    box = (x0, MARGIN_T + 16, W - MARGIN_R, H - MARGIN_B)
    # an event just after the last position (a disarm between two samples) still shows
    t_end = max([ts[-1], 1.0] + [e[0] - t0 for e in events if 0 <= e[0] - t0 <= ts[-1] + 5])
    lo, hi = min(min(alts), 0.0), max(max(alts), 5.0)
    p = _Panel(d, box, (0.0, t_end), (lo - 0.05 * (hi - lo), hi + 0.08 * (hi - lo)))
    f = _font(11)
    # mode bands first, under the grid and the line
    modes = [(e[0] - t0, e[2]) for e in events if e[1] == "mode"]
    before = [m for m in modes if m[0] <= 0]
    bands = ([(0.0, before[-1][1])] if before else []) + [m for m in modes if m[0] > 0]
    colour: dict[str, tuple] = {}
    starts = []
    for i, (ts_, name) in enumerate(bands):
        te = bands[i + 1][0] if i + 1 < len(bands) else t_end
        c = colour.setdefault(name or "?", MODE_COLOURS[len(colour) % len(MODE_COLOURS)])
        xa, _ = p.px(max(ts_, 0), 0)
        xb, _ = p.px(min(te, t_end), 0)
        d.rectangle((xa, box[1], max(xa, xb), box[3]), fill=c)
        if ts_ > 0:
            d.line([(xa, box[1]), (xa, box[3])], fill=MODE_LINE)
        starts.append((xa, str(name)))
    rows = [-1e9, -1e9]  # where the labels of each of two rows end, so close changes never overlap
    for xa, name in starts:  # after every band: the next band's colour must not cover a label
        row = 0 if rows[0] <= xa + 2 else (1 if rows[1] <= xa + 2 else min((0, 1), key=lambda r: rows[r]))
        x = max(xa + 2, rows[row])
        d.text((x, box[1] - 14 if row == 0 else box[1] + 2), name, fill=INK, font=f)
        rows[row] = x + d.textlength(name, font=f) + 6
    p.axes("time (s)", "", "")
    d.text(
        ((box[0] + box[2]) / 2, MARGIN_T - 24),
        "altitude above home (m), flight modes, arm/disarm",
        fill=INK,
        font=_font(14),
        anchor="mb",
    )
    d.line(p.many(ts, alts) if len(ts) > 1 else [p.px(ts[0], alts[0])] * 2, fill=ALT, width=2)
    label_end = -1e9
    for t, kind, _ in events:
        if kind not in ("armed", "disarmed") or not 0 <= t - t0 <= t_end:
            continue
        x, _ = p.px(t - t0, 0)
        y = box[3] - 4
        col = START if kind == "armed" else END
        if kind == "armed":
            d.polygon([(x, y - 12), (x - 6, y), (x + 6, y)], fill=col)
        else:
            d.polygon([(x, y), (x - 6, y - 12), (x + 6, y - 12)], fill=col)
        w = d.textlength(kind, font=f)
        ly = y - 12 if x + 7 > label_end else y - 28  # close to the previous label: one line up
        if x + 7 + w > box[2]:  # near the right edge: label on the left
            d.text((x - 7, ly), kind, fill=col, font=f, anchor="ra")
        else:
            d.text((x + 7, ly), kind, fill=col, font=f)
        label_end = x + 7 + w + 4


def _palette():
    """A fixed palette: every colour drawn, exactly, and greys for the edges of the text."""
    pal = _fonts.get("palette")
    if pal is None:
        from PIL import Image  # Pillow on first use (see the module's docstring)

        cols = [INK, GRID, TRACK, WAYPOINT, HOME, START, END, MODE_LINE, (255, 255, 255), *MODE_COLOURS]
        cols += [(g, g, g) for g in range(0, 256, 12)]
        flat = [c for col in cols for c in col]
        pal = Image.new("P", (1, 1))
        pal.putpalette(flat + [0] * (768 - len(flat)))
        _fonts["palette"] = pal
    return pal


def _png(img) -> bytes:
    """A palette PNG: one byte a pixel encodes in a third of the time of RGB (and is smaller)."""
    from PIL import Image  # Pillow on first use (see the module's docstring)

    buf = io.BytesIO()
    img.quantize(palette=_palette(), dither=Image.Dither.NONE).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def of_recorder(rec, last_s: float | None = None, title: str = "") -> bytes:
    """The picture of what ``rec`` (a FlightRecorder) kept, optionally only the last ``last_s`` s."""
    points = rec.points(last_s)
    events = list(rec.events)  # all of them: the mode before the window colours its start
    wps = [(i, it["lat"], it["lon"]) for i, it in enumerate(rec.mission or [], start=1) if "lat" in it]
    home = rec.home_or_first()
    span = f"{points[-1][0] - points[0][0]:.0f} s, {len(points)} positions" if points else "nothing yet"
    return render(points, events, wps, home, f"{title}: {span}" if title else span)


def save(rec, path: Path, last_s: float | None = None, title: str = "") -> Path:
    """Write the picture to ``path`` (what the pytest plugin keeps beside a failing test's report)."""
    path = Path(path)
    path.write_bytes(of_recorder(rec, last_s, title))
    return path


def save_link(link, path: Path, last_s: float | None = None, title: str = "") -> Path:
    """``save`` for a link (its recorder: attached now if it was not yet); creates the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(recorder_for(link), path, last_s, title)


def of_link(link, last_s: float | None = None, title: str = "") -> tuple[bytes, dict]:
    """The picture of ``link``'s flight recorder and what it shows (positions, seconds, highest
    altitude above home, mission waypoints): plain data, so a Ray node can answer it."""
    rec = recorder_for(link)
    png = of_recorder(rec, last_s, title)
    pts = rec.points(last_s)
    return png, {
        "positions": len(pts),
        "seconds": round(pts[-1][0] - pts[0][0], 1) if pts else 0.0,
        "max_relative_alt_m": round(max(p[3] for p in pts), 2) if pts else None,
        "mission_waypoints": len([it for it in rec.mission or [] if "lat" in it]),
    }
