"""Field series (downsampled keeping peaks), raw message pages and the picture, with the bad
inputs of issue 21: unknown types and fields (named, closest first), time ranges outside the
log, huge max_points and page sizes."""

from __future__ import annotations

import io
import random
import time

import pytest
from logfiles import gcs_log, hop_log, make_flight  # noqa: F401  (fixtures)

from sitlpool.logs import (
    MAX_POINTS,
    Downsampler,
    LogError,
    LogReader,
    TimeRangeError,
    UnknownField,
    fields,
    messages,
    picture,
)


def test_series_downsampled_keeps_peaks(gcs_log):
    raw = [(v[0] / 1e6, v[6]) for f, v in LogReader(gcs_log).messages(["CTUN"])]
    out = fields(gcs_log, ["CTUN.Alt"], max_points=100)
    s = out["fields"]["CTUN.Alt"]
    assert s["unit"] == "m" and s["count"] == len(raw) == 3111 and s["downsampled"]
    assert len(s["t"]) == len(s["v"]) <= 100
    assert max(s["v"]) == pytest.approx(max(v for _, v in raw))
    assert min(s["v"]) == pytest.approx(min(v for _, v in raw))
    assert s["t"] == sorted(s["t"])


def test_series_small_is_exact_and_ranges_apply(hop_log):
    out = fields(hop_log, "CTUN.Alt BAT.Volt", t0=50, t1=52, max_points=500)
    alt = out["fields"]["CTUN.Alt"]
    assert not alt["downsampled"] and 15 <= alt["count"] <= 25
    assert all(50 <= t <= 52 for t in alt["t"])
    assert out["fields"]["BAT.Volt"]["unit"] == "V"


def test_one_field_over_the_big_log_is_fast(gcs_log):
    fields(gcs_log, ["CTUN.Alt"])
    t = time.process_time()  # CPU time: the machine is shared by parallel test workers
    fields(gcs_log, ["CTUN.Alt"])
    assert time.process_time() - t < 1.0


def test_instances(make_flight):
    p = make_flight()
    out = fields(p, ["GPS.Spd", "GPS[1].Spd"])
    assert out["fields"]["GPS.Spd"]["count"] > 0 and out["fields"]["GPS[1].Spd"]["count"] == 0


def test_downsampler_bounded_and_exact_extremes():
    rnd = random.Random(5)
    ds = Downsampler(200)
    pts = [(i * 0.01, rnd.gauss(0, 1)) for i in range(100_000)]
    for t, v in pts:
        ds.add(t, v)
    out = ds.points()
    assert len(out) <= 200 and ds.count == 100_000
    assert max(v for _, v in out) == max(v for _, v in pts)
    assert min(v for _, v in out) == min(v for _, v in pts)
    assert len(ds.buckets) <= 100


def test_unknown_field_names_what_exists(hop_log):
    with pytest.raises(UnknownField) as e:
        fields(hop_log, ["CTUN.Altt"])
    msg = str(e.value)
    assert msg.startswith("CTUN has no field Altt (CTUN fields: Alt,") and "\n" not in msg


def test_unknown_type_names_closest_first(hop_log):
    with pytest.raises(UnknownField) as e:
        fields(hop_log, ["CTUNX.Alt"])
    assert "no message type CTUNX (closest: CTUN" in str(e.value)
    with pytest.raises(UnknownField, match="no message type GSP"):
        messages(hop_log, "GSP")


@pytest.mark.parametrize("bad", ["../../etc/passwd", "CTUN", "CTUN.", "CTUN.Alt;rm", ""])
def test_names_that_are_not_names(hop_log, bad):
    with pytest.raises(LogError):
        fields(hop_log, [bad] if bad else [])


def test_time_range_outside_the_log(hop_log):
    with pytest.raises(TimeRangeError, match=r"outside the log's CTUN messages \(42\.\d+-75\.\d+ s\)"):
        fields(hop_log, ["CTUN.Alt"], t0=500, t1=600)
    with pytest.raises(TimeRangeError, match="ends before it starts"):
        fields(hop_log, ["CTUN.Alt"], t0=60, t1=50)
    with pytest.raises(TimeRangeError, match="outside"):
        messages(hop_log, "CTUN", t0=1000)
    with pytest.raises(TimeRangeError, match="not a number"):
        fields(hop_log, ["CTUN.Alt"], t0=float("nan"))


@pytest.mark.parametrize("mp", [0, 1, MAX_POINTS + 1, 10**12, -5, 2.5, "500", True])
def test_bad_max_points(hop_log, mp):
    with pytest.raises(LogError, match="max_points must be a whole number from 2 to 10000"):
        fields(hop_log, ["CTUN.Alt"], max_points=mp)


def test_pages_cover_everything_once(hop_log):
    every = [v for f, v in LogReader(hop_log).messages(["MSG"])]
    got = []
    off = 0
    while True:
        page = messages(hop_log, "MSG", offset=off, limit=4)
        got += page["messages"]
        off += len(page["messages"])
        if not page["more"]:
            break
    assert [m["Message"] for m in got] == [v[1] for v in every]
    assert got[0]["time"] == every[0][0] / 1e6 and page["units"]["TimeUS"] == "µs"


@pytest.mark.parametrize("kw", [{"limit": 0}, {"limit": 100_000}, {"offset": -1}, {"limit": "10"}])
def test_bad_pages(hop_log, kw):
    with pytest.raises(LogError):
        messages(hop_log, "MSG", **kw)


def test_picture_is_a_png_with_a_panel_per_field(hop_log):
    from PIL import Image

    png = picture(hop_log, ["POS.RelHomeAlt", "BAT.Volt"])
    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG" and img.size[0] == 1100 and img.size[1] > 300
    one = Image.open(io.BytesIO(picture(hop_log, ["CTUN.Alt"], t0=45, t1=60)))
    assert one.size[1] < img.size[1]
    with pytest.raises(UnknownField):
        picture(hop_log, ["CTUN.Nope"])
    with pytest.raises(LogError, match="at most 8 fields"):
        picture(hop_log, ["CTUN.Alt"] * 9)


def test_fmt_messages_are_pages_too(hop_log):
    page = messages(hop_log, "FMT", limit=5)
    assert page["fields"] == ["Type", "Length", "Name", "Format", "Columns"] and len(page["messages"]) == 5
    assert page["messages"][0]["Name"] == "FMT" and page["messages"][0]["time"] is None
