"""The dashboard's live log reader (``sitlpool.dashboard.livelog.LiveLog``) on a real
ArduCopter log written out a second at a time, as a SITL writes it: each poll reads only the
bytes added since the last (plus the log's last few KB), the points follow the flight (the
hop's climb to 9.7 m), a log first seen mid-flight gets its points so far, a new log named
by LASTLOG.TXT starts new series, and a planted FIFO or symlink is never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import SHARED
from sitlpool.dashboard import livelog
from sitlpool.dashboard.livelog import SERIES, LiveLog
from sitlpool.logs import fields

HOP = SHARED / "logs" / "copter-hop.BIN"
pytestmark = pytest.mark.skipif(not HOP.is_file(), reason=f"no {HOP} (the real ArduCopter logs of ../shared)")
SECOND = 75_000  # the hop's bytes per second of flight (2.4 MB in 33 s)


def flight_dir(tmp_path: Path, number: int = 1) -> Path:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "LASTLOG.TXT").write_text(f"{number}\r\n")
    return tmp_path / "logs" / f"{number:08d}.BIN"


def test_reads_only_what_the_log_gained(tmp_path, monkeypatch):
    src = HOP.read_bytes()
    path = flight_dir(tmp_path)
    ll = LiveLog(tmp_path)
    read: list[int] = []
    pread = os.pread

    def counted(fd, n, offset):  # the real read, counted
        data = pread(fd, n, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(livelog.os, "pread", counted)
    monkeypatch.setattr(livelog, "BACKFILL_MAX", 0)  # this log is followed from its first byte
    with open(path, "wb") as f:
        for i in range(0, len(src), SECOND):
            f.write(src[i : i + SECOND])
            f.flush()
            read.clear()
            ll.poll()
            assert sum(read) <= min(i + SECOND, len(src)) - max(0, i - 100) + livelog.TAIL, (i, read)
    assert ll.name == "00000001.BIN" and ll.size == len(src) and ll.error is None
    pts = list(ll.points)
    assert len(pts) >= 30 and all(b[0] > a[0] for a, b in zip(pts, pts[1:]))
    alt = [p[1 + SERIES.index("CTUN.Alt")] for p in pts]
    want = max(fields(HOP, ["CTUN.Alt"])["fields"]["CTUN.Alt"]["v"])
    assert max(alt) == pytest.approx(want, abs=0.5) and alt[0] < 0.5 and alt[-1] < 0.5  # up and down again
    volt = [p[1 + SERIES.index("BAT.Volt")] for p in pts]
    assert all(v is not None and 10 < v < 13 for v in volt)
    assert ll.poll() is False  # nothing new: no point
    d = ll.as_dict(series=True)
    assert d is not None and d["last"] == pts[-1] and len(d["series"]) == len(pts)


def test_a_log_seen_mid_flight_and_the_next_log(tmp_path):
    src = HOP.read_bytes()
    path = flight_dir(tmp_path)
    path.write_bytes(src[: 20 * SECOND])  # a dashboard opened 20 s into the flight
    ll = LiveLog(tmp_path)
    assert ll.poll()
    assert len(ll.points) >= 15  # the flight so far, a point a second
    # a new flight: LASTLOG.TXT names log 2, which starts from its header
    path2 = flight_dir(tmp_path, 2)
    path2.write_bytes(src[: 3 * SECOND])
    assert ll.poll()
    assert ll.name == "00000002.BIN" and 0 < len(ll.points) <= 3


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_a_planted_file_is_never_read(tmp_path, plant):
    path = flight_dir(tmp_path)
    if plant == "fifo":
        os.mkfifo(path)  # an open that blocked would stall the whole dashboard
    else:
        (tmp_path / "secret").write_bytes(HOP.read_bytes()[: 5 * SECOND])
        path.symlink_to(tmp_path / "secret")
    ll = LiveLog(tmp_path)
    assert ll.poll() is False and not ll.points
    assert ll.error is not None and "00000001.BIN" in ll.error
