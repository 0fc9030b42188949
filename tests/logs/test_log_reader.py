"""The streaming DataFlash reader on real ArduCopter logs and on logs made broken on purpose:
formats and units as pymavlink's DFReader reads them, time ranges, truncated and corrupt
files read up to the damage, files that are not logs, bounded memory for a huge log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from logfiles import gcs_log, hop_log  # noqa: F401  (fixtures)
from pymavlink import DFReader

from sitlpool.logs import LogReader, NotALog, summary


def test_types_fields_and_units_match_dfreader(hop_log):
    ours = LogReader(hop_log).describe()
    ref = DFReader.DFReader_binary(str(hop_log), zero_time_base=False)
    present = {ref.id_to_name[i] for i, n in enumerate(ref.counts) if n}
    assert set(ours["types"]) == present
    assert len(ours["types"]) == 70 and ours["messages"] == 60_756  # as the log's README says
    assert ours["types"]["CTUN"]["count"] == ref.counts[ref.name_to_id["CTUN"]]
    assert ours["defined_types"] == len(ref.formats)
    ctun = ours["types"]["CTUN"]["fields"]
    assert ctun["Alt"] == "m" and ctun["CRt"] == "cm/s" and ctun["TimeUS"] == "µs"
    for name in ("CTUN", "GPS", "BAT", "ATT", "POS"):
        f = next(f for f in ref.formats.values() if f.name == name)
        assert list(ours["types"][name]["fields"]) == f.columns


def test_values_and_counts_match_dfreader(hop_log):
    ref = DFReader.DFReader_binary(str(hop_log), zero_time_base=False)
    want = []
    while True:
        m = ref.recv_match(type=["GPS", "MODE", "MSG"])
        if m is None:
            break
        want.append((m.get_type(), m.TimeUS, [getattr(m, c) for c in m.get_fieldnames()]))
    got = [(f.name, v[0], v) for f, v in LogReader(hop_log).messages(["GPS", "MODE", "MSG"])]
    assert len(got) == len(want) > 100
    for (n1, t1, v1), (n2, t2, v2) in zip(got, want):
        assert (n1, t1) == (n2, t2)
        assert v1 == pytest.approx(v2) if n1 == "GPS" else v1 == v2


def test_time_range_selects_by_timeus(hop_log):
    ts = [v[0] / 1e6 for _, v in LogReader(hop_log).messages(["CTUN"], t0=50.0, t1=60.0)]
    assert ts and min(ts) >= 50.0 and max(ts) <= 60.0
    every = [v[0] / 1e6 for _, v in LogReader(hop_log).messages(["CTUN"])]
    assert len(ts) == len([t for t in every if 50.0 <= t <= 60.0])


def test_real_log_ends_with_partial_message(hop_log):
    r = LogReader(hop_log)
    r.read_formats()
    assert r.end.status == "truncated"  # SITL stopped mid-block: 7 bytes of a message
    assert r.end.offset == hop_log.stat().st_size - 7
    assert r.end.last_time == pytest.approx(75.297, abs=0.01)


def test_truncated_log_reads_up_to_the_cut(hop_log, tmp_path):
    cut = tmp_path / "cut.BIN"
    data = hop_log.read_bytes()
    cut.write_bytes(data[: len(data) // 2 + 5])  # mid-message
    s = summary(cut)
    assert s["end"]["status"] == "truncated"
    assert 0 < s["end"]["offset"] <= len(data) // 2 + 5
    assert "incomplete" in s["end"]["detail"]
    assert 42 < s["end"]["last_time"] < 75
    assert s["duration"] > 5 and s["modes"]  # what was before the cut is all there


def test_corrupt_log_stops_at_the_damage_and_says_where(hop_log, tmp_path):
    bad = tmp_path / "bad.BIN"
    data = bytearray(hop_log.read_bytes())
    at = 1_000_000
    # the message starting at or after byte ``at``: found by walking with our reader on a cut copy
    probe = tmp_path / "probe.BIN"
    probe.write_bytes(bytes(data[:at]))
    r = LogReader(probe)
    r.read_formats()
    start = r.end.offset  # the partial message at the cut starts here
    data[start : start + 2] = b"\x00\x00"
    bad.write_bytes(bytes(data))
    r = LogReader(bad)
    n = sum(1 for _ in r.messages(["CTUN"]))
    assert r.end.status == "corrupt"
    assert r.end.offset == start
    assert f"offset {start}" in r.end.detail
    full = sum(1 for _ in LogReader(hop_log).messages(["CTUN"]))
    assert 0 < n < full


def test_unknown_type_byte_is_corruption(hop_log, tmp_path):
    probe = tmp_path / "probe.BIN"
    probe.write_bytes(hop_log.read_bytes()[:300_000])
    r = LogReader(probe)
    r.read_formats()  # end.offset: where the last whole message ends
    data = bytearray(hop_log.read_bytes()[: r.end.offset])
    full = LogReader(hop_log)
    full.read_formats()
    free = next(t for t in range(1, 255) if t not in full.formats)
    data += b"\xa3\x95" + bytes([free]) + b"\x00" * 40  # a type with no FMT
    p = tmp_path / "unknown.BIN"
    p.write_bytes(bytes(data))
    r = LogReader(p)
    r.read_formats()
    assert r.end.status == "corrupt" and f"unknown message type {free}" in r.end.detail
    assert r.end.offset == len(data) - 43


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "empty"),
        (b"hello, this is text\n" * 100, "does not start with a DataFlash header"),
        (b"\xfe\x09\x00\x00" * 50, "does not start with a DataFlash header"),  # MAVLink bytes (a tlog)
        (b"\xa3\x95\x05" + b"\x00" * 100, "no format (FMT) messages"),
    ],
)
def test_not_a_log_is_one_clear_line(tmp_path, content, words):
    p = tmp_path / "x.BIN"
    p.write_bytes(content)
    with pytest.raises(NotALog) as e:
        summary(p)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(NotALog, match="directory"):
        LogReader(tmp_path)
    with pytest.raises(Exception, match="No such file"):
        LogReader(tmp_path / "nope.BIN")


def test_memory_stays_bounded_for_a_huge_log(gcs_log, tmp_path):
    """~250 MB (the data of the 22.7 MB log repeated): summary and a field series in a
    fresh process stay far below 150 MB peak RSS (bench/logs.py measures 500 MB)."""
    huge = tmp_path / "huge.BIN"
    data = gcs_log.read_bytes()[:22704122]  # up to its last whole message
    with open(huge, "wb") as f:
        for _ in range(11):
            f.write(data)
    code = (
        "import sys\n"
        "from sitlpool import logs\n"
        "s = logs.summary(sys.argv[1])\n"
        "f = logs.fields(sys.argv[1], ['ESC.RPM'], max_points=10000)\n"
        "assert s['end']['status'] == 'complete', s['end']\n"
        "assert f['fields']['ESC.RPM']['count'] > 300000\n"
        # VmHWM: the peak of this process (ru_maxrss would carry the parent's over fork+exec)
        "print(next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(huge)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) < 150


def test_reads_a_log_being_written(hop_log, tmp_path):
    """A live log (the SITL still writing) reads up to what is there."""
    live = tmp_path / "live.BIN"
    data = hop_log.read_bytes()
    with open(live, "wb") as f:
        f.write(data[:500_000])
        f.flush()
        s1 = summary(live)
        f.write(data[500_000:1_500_000])
        f.flush()
        s2 = summary(live)
    assert s1["end"]["status"] in ("truncated", "complete") and s2["duration"] > s1["duration"]


def test_path_objects_and_strings(hop_log):
    assert LogReader(str(hop_log)).path == Path(hop_log)
