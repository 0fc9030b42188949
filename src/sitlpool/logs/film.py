"""A film of a flight from its DataFlash log: the map (track so far, home, the mission's
waypoints from CMD) and a HUD (mode, armed, altitude, speeds, battery, log time, the last
MSG texts, an altitude strip) over time, as an MP4 (H.264, the ffmpeg that imageio-ffmpeg's
wheel carries) or a GIF (Pillow), for a bug report.

One streamed pass over the log samples the vehicle's state on a fixed time step (at most
``MAX_SAMPLES`` samples: the step doubles beyond, so memory is bounded whatever the log's
length); the frames are then drawn with Pillow one at a time and piped to the encoder (the
MP4 to ffmpeg's stdin, the GIF written frame by frame). The track is drawn incrementally
on a kept layer; each frame copies it and adds the vehicle and the HUD.

Times are log times (s since boot, as ``summary`` gives them). ``speed`` is log seconds per
film second; ``None`` plays real time up to ``MAX_FILM_S`` of film and faster beyond.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .draw import _font, _ticks
from .reader import LogError, LogReader, TimeRangeError
from .series import _check_range
from .summary import _FIRMWARE, ARM_TEXTS, EARTH_R
from .tables import MODE_TABLES, VEHICLES

W, H = 960, 540  # frame size (the GIF is drawn at this size and halved)
MAP = 540  # the map is the left square; the HUD the rest
MAX_FILM_S = 120.0  # speed=None: real time up to this much film, faster beyond
MAX_FRAMES = 36000  # an hour at 10 fps
MAX_SAMPLES = 20000  # the state samples one pass keeps (the step doubles beyond)
MAX_MSGS = 2000  # MSG texts kept (the newest); the HUD shows the last few
FPS_RANGE = (1, 60)
GIF_MAX_FPS = 25  # viewers slow GIF frames shorter than 20 ms down to 100 ms
SPEED_RANGE = (0.1, 1000.0)
FORMATS = ("mp4", "gif")
TYPES = ("POS", "GPS", "CTUN", "BAT", "MODE", "MSG", "ARM", "EV", "CMD", "ORGN", "VER", "ATT")
INK, GRID, TRACK, WP, HOME = (30, 30, 30), (225, 225, 225), (31, 119, 180), (214, 120, 0), (44, 160, 44)
HUD_BG, DIM, ARMED, DISARMED = (246, 246, 246), (110, 110, 110), (214, 39, 40), (44, 130, 44)


@dataclass
class Film:
    """What ``render_flight`` wrote."""

    path: Path
    format: str
    frames: int
    fps: int
    speed: float
    t0: float  # log time of the first frame (s)
    t1: float  # log time of the last frame (s)
    width: int
    height: int
    size: int  # bytes
    key_frame: bytes = b""  # PNG of the last frame (the whole track)
    end: dict = field(default_factory=dict)  # how the log read ended (complete, truncated, corrupt)

    @property
    def duration(self) -> float:
        return self.frames / self.fps

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "format": self.format,
            "frames": self.frames,
            "fps": self.fps,
            "duration_s": round(self.duration, 3),
            "speed": round(self.speed, 4),
            "t0": round(self.t0, 3),
            "t1": round(self.t1, 3),
            "width": self.width,
            "height": self.height,
            "bytes": self.size,
            "end": self.end,
        }


# a sample of the state: (lat, lng, alt, ground speed, climb, volt, mAh, remaining %, mode, armed, MSGs so far, yaw)
_LAT, _LNG, _ALT, _SPD, _VZ, _VOLT, _MAH, _PCT, _MODE, _ARMED, _NMSG, _YAW = range(12)


class _Track:
    """The pass over the log: the state sampled every ``step`` s, MSG texts, waypoints, home."""

    def __init__(self, t0: float | None, step: float):
        self.t0 = t0
        self.step = step
        self.samples: list[tuple] = []
        self.state: list = [None, None, None, None, None, None, None, None, None, False, 0, None]
        self.msgs: list[tuple[float, str]] = []
        self.dropped_msgs = 0
        self.wps: dict[int, tuple[float, float]] = {}
        self.home: tuple[float, float] | None = None
        self.vehicle: str | None = None
        self.t_last: float | None = None

    def advance(self, t: float) -> None:
        """Sample the state for every step up to log time ``t`` (the message at ``t`` not yet taken)."""
        if self.t0 is None:
            self.t0 = t
        while self.t0 + len(self.samples) * self.step <= t:
            self.samples.append(tuple(self.state))
            if len(self.samples) > MAX_SAMPLES:
                self.samples = self.samples[::2]
                self.step *= 2

    def msg(self, t: float, text: str) -> None:
        self.msgs.append((t, text))
        if len(self.msgs) > MAX_MSGS:
            del self.msgs[: MAX_MSGS // 2]
            self.dropped_msgs += MAX_MSGS // 2
        self.state[_NMSG] = self.dropped_msgs + len(self.msgs)


def _read(path: Path, t0: float | None, t1: float | None, step: float) -> tuple[_Track, LogReader]:
    reader = LogReader(path)
    tr = _Track(None, step)  # the first frame: the first timed message at or after t0
    st = tr.state
    for f, v in reader.messages(TYPES, None, t1):
        n, ix = f.name, f.index
        if n == "VER" and "BU" in ix:
            tr.vehicle = VEHICLES.get(v[ix["BU"]], tr.vehicle)
        if not f.time_us:
            continue
        t = v[0] / 1e6
        if t0 is None or t >= t0:
            tr.advance(t)
            tr.t_last = t if tr.t_last is None else max(tr.t_last, t)

        def g(col: str, v=v, ix=ix):
            i = ix.get(col)
            return v[i] if i is not None and i < len(v) else None

        if n == "POS" and g("Lat") is not None:
            st[_LAT], st[_LNG], st[_ALT] = g("Lat"), g("Lng"), g("RelHomeAlt")
        elif n == "GPS" and (g("I") or 0) == 0:
            st[_SPD] = g("Spd")
            vz = g("VZ")
            st[_VZ] = -vz if vz is not None else None  # NED: VZ is positive down
            if st[_LAT] is None and g("Status") and g("Status") >= 3:
                st[_LAT], st[_LNG] = g("Lat"), g("Lng")
        elif n == "CTUN" and st[_ALT] is None and g("Alt") is not None:
            st[_ALT] = g("Alt")
        elif n == "BAT" and (g("Inst") or 0) == 0:
            st[_VOLT], st[_MAH], st[_PCT] = g("Volt"), g("CurrTot"), g("RemPct")
        elif n == "ATT":
            st[_YAW] = g("Yaw")
        elif n == "MODE":
            st[_MODE] = g("ModeNum") if "ModeNum" in ix else v[1]
        elif n == "ARM":
            st[_ARMED] = bool(g("ArmState"))
        elif n == "EV" and g("Id") in (10, 11):
            st[_ARMED] = g("Id") == 10
        elif n == "MSG":
            text = str(g("Message") or "")
            tr.msg(t, text)
            if text in ARM_TEXTS:
                st[_ARMED] = ARM_TEXTS[text]
            elif tr.vehicle is None and _FIRMWARE.match(text):
                tr.vehicle = text.split()[0]
        elif n == "CMD" and g("Lat") and g("Lng") and g("CNum"):
            tr.wps[int(g("CNum"))] = (g("Lat"), g("Lng"))
        elif n == "ORGN" and g("Type") == 1 and g("Lat") and tr.home is None:
            tr.home = (g("Lat"), g("Lng"))
    if tr.t_last is not None:
        tr.advance(tr.t_last)
    return tr, reader


class _Map:
    """Local metres north/east of home (or the first position) to pixels on the map square."""

    def __init__(self, tr: _Track):
        pts = [(s[_LAT], s[_LNG]) for s in tr.samples if s[_LAT] is not None]
        pts += list(tr.wps.values())
        self.origin = tr.home or (pts[0] if pts else None)
        lat0 = self.origin[0] if self.origin else 0.0
        self.k_n = math.radians(1) * EARTH_R
        self.k_e = self.k_n * math.cos(math.radians(lat0))
        ne = [self.ne(p) for p in pts] or [(0.0, 0.0)]
        ne.append((0.0, 0.0))
        n_lo, n_hi = min(p[0] for p in ne), max(p[0] for p in ne)
        e_lo, e_hi = min(p[1] for p in ne), max(p[1] for p in ne)
        span = max(n_hi - n_lo, e_hi - e_lo, 20.0) * 1.15
        self.cn, self.ce = (n_lo + n_hi) / 2, (e_lo + e_hi) / 2
        self.span = span
        self.px_per_m = (MAP - 60) / span

    def ne(self, p: tuple[float, float]) -> tuple[float, float]:
        o = self.origin or p
        return (p[0] - o[0]) * self.k_n, (p[1] - o[1]) * self.k_e

    def xy(self, p: tuple[float, float]) -> tuple[float, float]:
        n, e = self.ne(p)
        return MAP / 2 + (e - self.ce) * self.px_per_m, MAP / 2 + 10 - (n - self.cn) * self.px_per_m


def _background(tr: _Track, m: _Map, title: str):
    from PIL import Image, ImageDraw  # Pillow on first use: importing sitlpool.logs stays fast

    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    f11, f12 = _font(11), _font(12)
    # grid every 1-2-5 step of metres, labelled in metres north/east of home
    half = m.span / 2
    for v in _ticks(m.ce - half, m.ce + half, 6):
        x = MAP / 2 + (v - m.ce) * m.px_per_m
        d.line([(x, 40), (x, MAP - 10)], fill=GRID)
        d.text((x, MAP - 8), f"{v:g}", fill=DIM, font=f11, anchor="mb")
    for v in _ticks(m.cn - half, m.cn + half, 6):
        y = MAP / 2 + 10 - (v - m.cn) * m.px_per_m
        if 40 <= y <= MAP - 10:
            d.line([(20, y), (MAP - 10, y)], fill=GRID)
            d.text((4, y), f"{v:g}", fill=DIM, font=f11, anchor="lm")
    d.text((8, 6), title, fill=INK, font=_font(14))
    d.text((8, 24), "map: metres north (up) / east of home", fill=DIM, font=f11)
    if m.origin is None:
        d.text((MAP / 2, MAP / 2), "no position in this log", fill=INK, font=f12, anchor="mm")
    wps = [m.xy(tr.wps[k]) for k in sorted(tr.wps)]
    if len(wps) > 1:
        d.line(wps, fill=WP, width=1)
    for i, (x, y) in enumerate(wps):
        d.rectangle((x - 4, y - 4, x + 4, y + 4), outline=WP, width=2)
        d.text((x + 6, y - 6), str(sorted(tr.wps)[i]), fill=WP, font=f11)
    if m.origin is not None:
        x, y = m.xy(m.origin)
        d.polygon([(x, y - 7), (x - 6, y + 5), (x + 6, y + 5)], outline=HOME, width=2)
        d.text((x + 8, y + 2), "home", fill=HOME, font=f11)
    d.rectangle((MAP, 0, W, H), fill=HUD_BG)
    return img


def _alt_strip(tr: _Track, x0: int, y0: int, w: int, h: int):
    """The altitude over the whole film, drawn once; each frame adds its cursor."""
    from PIL import Image, ImageDraw  # as _background

    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    alts = [s[_ALT] for s in tr.samples]
    vals = [a for a in alts if a is not None]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    n = max(1, len(alts) - 1)
    pts = [(i * (w - 1) / n, h - 4 - (a - lo) / (hi - lo) * (h - 18)) for i, a in enumerate(alts) if a is not None]
    if len(pts) > 1:
        d.line(pts, fill=TRACK, width=1)
    d.rectangle((0, 0, w - 1, h - 1), outline=GRID)
    d.text((3, 2), f"altitude {lo + 0.0:.1f} to {hi:.1f} m", fill=DIM, font=_font(11))
    return img


def _hud(d, s: tuple, t: float, tr: _Track, m: _Map, film_t: float) -> None:
    x = MAP + 16
    f12, f14, f22 = _font(12), _font(14), _font(22)
    table = MODE_TABLES.get(tr.vehicle or "", {})
    mode = "-" if s[_MODE] is None else table.get(s[_MODE], f"mode {s[_MODE]}")
    d.text((x, 14), mode, fill=INK, font=f22)
    armed = s[_ARMED]
    d.text((W - 16, 18), "ARMED" if armed else "disarmed", fill=ARMED if armed else DISARMED, font=f14, anchor="ra")
    d.text((x, 46), f"log time {t:8.2f} s    film {film_t:6.1f} s", fill=DIM, font=f12)

    def num(v, fmt: str, unit: str) -> str:
        return "-" if v is None else f"{v + 0.0:{fmt}} {unit}".replace("-0.0 ", "0.0 ").replace("+0.0 ", "0.0 ")

    where = "-"
    if s[_LAT] is not None and m.origin is not None:
        n, e = m.ne((s[_LAT], s[_LNG]))
        where = f"{n:.1f} m N, {e:.1f} m E ({math.hypot(n, e):.1f} m)".replace("-0.0 ", "0.0 ")
    rows = [
        ("altitude", num(s[_ALT], ".1f", "m above home")),
        ("ground speed", num(s[_SPD], ".1f", "m/s")),
        ("climb", num(s[_VZ], "+.1f", "m/s")),
        ("heading", num(s[_YAW], ".0f", "deg")),
        ("battery", f"{num(s[_VOLT], '.2f', 'V')}   {num(s[_MAH], '.0f', 'mAh')}   {num(s[_PCT], '.0f', '%')}"),
        ("from home", where),
    ]
    for i, (k, v) in enumerate(rows):
        d.text((x, 74 + i * 22), k, fill=DIM, font=f14)
        d.text((x + 110, 74 + i * 22), v, fill=INK, font=f14)
    d.text((x, 214), "messages", fill=DIM, font=f12)
    first = tr.dropped_msgs
    shown = [tr.msgs[i - first] for i in range(max(first, s[_NMSG] - 6), s[_NMSG]) if i >= first]
    for i, (tm, text) in enumerate(shown):
        line = f"{tm:7.1f}  {text}"
        while len(line) > 8 and d.textlength(line, font=f12) > W - x - 10:
            line = line[:-2]
        d.text((x, 232 + i * 18), line, fill=INK, font=f12)


def _encoder(out: Path, fmt: str, fps: int):
    """``(put(img), close())``: the frames to an MP4 through ffmpeg, or to a GIF written as they come."""
    if fmt == "mp4":
        try:
            import imageio_ffmpeg  # the encoder, only when filming: its wheel carries ffmpeg
        except ImportError:
            raise LogError(
                "an MP4 needs imageio-ffmpeg (pip install imageio-ffmpeg); --gif needs only Pillow"
            ) from None
        gen = imageio_ffmpeg.write_frames(
            str(out),
            (W, H),
            fps=fps,
            codec="libx264",
            quality=None,
            macro_block_size=2,
            ffmpeg_log_level="error",
            output_params=["-preset", "veryfast", "-crf", "26", "-movflags", "+faststart", "-f", "mp4"],
        )
        gen.send(None)

        def close() -> None:
            gen.close()  # ffmpeg finishes the file and exits; a second close does nothing

        return (lambda img: gen.send(img.tobytes())), close
    from PIL import GifImagePlugin, Image, ImageChops  # as _background

    pal = Image.new("P", (1, 1))
    cube = [c for r in range(6) for g in range(6) for b in range(6) for c in (r * 51, g * 51, b * 51)]
    exact = [c for rgb in (INK, GRID, TRACK, WP, HOME, ARMED, DISARMED, HUD_BG, DIM) for c in rgb]
    greys = [c for i in range(31) for c in (i * 255 // 30,) * 3]
    pal.putpalette(cube + exact + greys)  # 256 colours: the drawing's own exactly, the rest near
    fh = open(out, "wb")
    delay = round(1000 / fps)

    prev = None

    def put(img) -> None:
        nonlocal prev
        p = img.reduce(2).quantize(palette=pal, dither=Image.Dither.NONE)
        box = (0, 0) + p.size
        if prev is None:
            header, _ = GifImagePlugin.getheader(p, None, {"loop": 0})
            fh.write(b"".join(header))
        else:  # only the rectangle that changed (kept frames: disposal 1), the rest shows through
            box = ImageChops.difference(p, prev).getbbox() or (0, 0, 1, 1)
        prev = p
        for chunk in GifImagePlugin.getdata(p.crop(box), offset=box[:2], duration=delay, disposal=1):
            fh.write(chunk)

    def close_gif() -> None:
        if not fh.closed:
            fh.write(b";")
            fh.close()

    return put, close_gif


def _check(fps, speed, fmt: str) -> None:
    if isinstance(fps, bool) or not isinstance(fps, int) or not FPS_RANGE[0] <= fps <= FPS_RANGE[1]:
        raise LogError(f"fps must be a whole number from {FPS_RANGE[0]} to {FPS_RANGE[1]}, not {fps!r}")
    if fmt not in FORMATS:
        raise LogError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "gif" and fps > GIF_MAX_FPS:
        raise LogError(f"a GIF plays at most {GIF_MAX_FPS} fps (viewers slow faster frames down), not {fps}")
    if speed is not None and (
        isinstance(speed, bool)
        or not isinstance(speed, (int, float))
        or not math.isfinite(speed)
        or not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]
    ):
        raise LogError(f"speed must be from {SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g} (log s per film s), not {speed!r}")


def render_flight(
    log: str | os.PathLike,
    out: str | os.PathLike,
    fps: int = 10,
    speed: float | None = None,
    format: str | None = None,
    t0: float | None = None,
    t1: float | None = None,
    title: str = "",
    data_dir: str | os.PathLike | None = None,
) -> Film:
    """Write a film of the flight in ``log`` (a kept log's id or a path to a .BIN) to ``out``:
    MP4 (H.264) or GIF (``format``, default by ``out``'s suffix), ``fps`` frames a second,
    ``speed`` log seconds per film second (None: real time up to 2 minutes of film), log time
    ``t0..t1``. The file appears whole or not at all. One-line ``LogError`` on bad input."""
    from PIL import ImageDraw  # as _background

    from .store import LogStore

    out = Path(out)
    if format is None:
        format = "gif" if out.suffix.lower() == ".gif" else "mp4"
    fmt = format.lower() if isinstance(format, str) else repr(format)
    _check(fps, speed, fmt)
    _check_range(t0, t1)
    path = LogStore(data_dir).resolve(log, allow_paths=True)
    step = (min(speed, 1.0) if speed is not None else 1.0) / fps
    tr, reader = _read(path, t0, t1, step)
    if tr.t0 is None or tr.t_last is None or not tr.samples:
        if t0 is not None or t1 is not None:
            raise TimeRangeError(f"no messages with a time in {t0 if t0 is not None else 'start'}-{t1 or 'end'} s")
        raise LogError(f"{path.name}: no timed messages to film")
    start, end_t = tr.t0, max(tr.t0, tr.t_last if t1 is None else min(t1, tr.t_last))
    span = end_t - start
    if speed is None:
        speed = max(1.0, span / MAX_FILM_S)
    frame_dt = speed / fps
    n = int(span / frame_dt + 1e-9) + 1
    if n > MAX_FRAMES:
        raise LogError(
            f"{n} frames ({span:.0f} s of log at speed {speed:g}, {fps} fps): at most {MAX_FRAMES}; "
            "raise the speed, lower the fps or film a time range"
        )
    m = _Map(tr)
    layer = _background(tr, m, title or f"{path.name}  ({start:.1f}-{end_t:.1f} s log time, x{speed:.3g})")
    sx, sy, sw, sh = MAP + 16, H - 130, W - MAP - 32, 112
    layer.paste(_alt_strip(tr, sx, sy, sw, sh), (sx, sy))
    draw_layer = ImageDraw.Draw(layer)
    last_xy: tuple[float, float] | None = None
    drawn = 0  # samples drawn on the track layer
    given = out
    out = Path(os.path.realpath(out))  # a symlink: its target written, the link kept
    if out.exists() and not out.is_file():  # a device or FIFO (/dev/null) is never replaced by the film
        raise LogError(f"cannot write the film to {given}: it is not a regular file; give a file name (e.g. film.mp4)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
        os.close(fd)
        tmp = Path(name)
    except OSError as e:
        raise LogError(f"cannot write the film to {out}: {e.strerror or e}") from None
    put, close = _encoder(tmp, fmt, fps)
    frame = layer
    ok = False
    try:
        for k in range(n):
            t = start + k * frame_dt
            i = min(len(tr.samples) - 1, int(round((t - start) / tr.step)))
            for s in tr.samples[drawn : i + 1]:  # the track so far, every sample
                if s[_LAT] is not None and m.origin is not None:
                    xy = m.xy((s[_LAT], s[_LNG]))
                    if last_xy is not None:
                        draw_layer.line([last_xy, xy], fill=TRACK, width=3)
                    last_xy = xy
            drawn = max(drawn, i + 1)
            frame = layer.copy()
            d = ImageDraw.Draw(frame)
            s = tr.samples[i]
            if last_xy is not None and s[_LAT] is not None:
                x, y = last_xy
                d.ellipse((x - 6, y - 6, x + 6, y + 6), fill=ARMED if s[_ARMED] else INK)
                if s[_YAW] is not None:
                    a = math.radians(s[_YAW])
                    d.line([(x, y), (x + 16 * math.sin(a), y - 16 * math.cos(a))], fill=INK, width=2)
            cx = sx + (t - start) / span * (sw - 1) if span > 0 else sx
            d.line([(cx, sy + 1), (cx, sy + sh - 2)], fill=ARMED, width=1)
            _hud(d, s, t, tr, m, k / fps)
            put(frame)
        close()
        if tmp.stat().st_size == 0:
            raise LogError(f"the encoder wrote nothing to {out}")
        os.replace(tmp, out)
        ok = True
    except OSError as e:  # ffmpeg's pipe broke (its long message is cut to its first line), a full disk
        why = e.strerror or (str(e).strip().splitlines() or ["?"])[0]
        raise LogError(f"cannot write the film to {out}: {why}") from None
    finally:
        if not ok:
            with contextlib.suppress(Exception):
                close()
            tmp.unlink(missing_ok=True)
    buf = io.BytesIO()
    frame.save(buf, format="PNG", compress_level=1)
    return Film(
        path=out,
        format=fmt,
        frames=n,
        fps=fps,
        speed=speed,
        t0=start,
        t1=start + (n - 1) * frame_dt,
        width=W if fmt == "mp4" else W // 2,
        height=H if fmt == "mp4" else H // 2,
        size=out.stat().st_size,
        key_frame=buf.getvalue(),
        end=reader.end.as_dict(),
    )
