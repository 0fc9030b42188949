"""A film of a flight (issue 25): ``sitlpool.logs.film.render_flight`` on the real hop log
and a synthetic plane flight, read back with imageio-ffmpeg's reader (MP4) and Pillow (GIF);
the ``render_flight`` MCP tool over stdio; ``sitlpool logs film``; every bad input one line
and no file left behind."""

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import pytest
from logfiles import hop_log, make_flight  # noqa: F401  (fixtures)
from PIL import Image

from sitlpool.logs import LogError, LogStore, NotALog, TimeRangeError, UnknownLog
from sitlpool.logs.film import MAP, TRACK, H, W, render_flight

HUD_ARMED_BOX = (W - 110, 12, W - 10, 36)  # where the HUD says ARMED (red) or disarmed (green)


def read_mp4(path: Path) -> tuple[dict, list[Image.Image]]:
    gen = imageio_ffmpeg.read_frames(str(path))
    meta = next(gen)
    frames = [Image.frombytes("RGB", meta["size"], bytes(b)) for b in gen]
    return meta, frames


def pixels(img: Image.Image, box) -> list[tuple[int, int, int]]:
    b = img.convert("RGB").crop(box).tobytes()
    return list(zip(b[0::3], b[1::3], b[2::3]))


def redness(img: Image.Image, box) -> float:
    """Mean of red minus green over the non-background pixels of ``box`` (text: ARMED red, disarmed green)."""
    px = [p for p in pixels(img, box) if min(p) < 200]
    return sum(r - g for r, g, _b in px) / max(1, len(px))


def track_pixels(img: Image.Image) -> int:
    """Pixels of the track's blue on the map (the left square)."""
    scale = img.width / W
    box = (0, int(40 * scale), int(MAP * scale), img.height)
    return sum(1 for p in pixels(img, box) if all(abs(a - b) < 30 for a, b in zip(p, TRACK)))


def test_the_hop_as_an_mp4_lasts_the_flight_frame_by_frame(hop_log, tmp_path):
    out = tmp_path / "films" / "hop.mp4"
    film = render_flight(hop_log, out)
    # the log's timed messages span 42.606..75.297 s: real time (speed 1, the default under 2 minutes) at 10 fps
    assert (film.format, film.fps, film.speed, film.frames) == ("mp4", 10, 1.0, 327)
    assert film.t0 == pytest.approx(42.606, abs=1e-3) and film.t1 == pytest.approx(75.206, abs=1e-3)
    assert film.end["status"] == "truncated"  # the copy ends mid-message: read up to it
    meta, frames = read_mp4(out)
    assert meta["codec"] == "h264" and meta["fps"] == 10.0 and meta["size"] == (W, H)
    assert len(frames) == 327 and meta["duration"] == pytest.approx(32.7, abs=0.05)
    assert film.size == out.stat().st_size > 10_000
    # disarmed at the start (green), armed mid-hop (red: armed at ~49 s, landed and disarmed at ~74 s)
    assert redness(frames[0], HUD_ARMED_BOX) < -20
    assert redness(frames[150], HUD_ARMED_BOX) > 40
    assert redness(frames[-1], HUD_ARMED_BOX) < -20
    assert frames[0].tobytes() != frames[150].tobytes()
    key = Image.open(io.BytesIO(film.key_frame))
    assert key.format == "PNG" and key.size == (W, H)
    assert [p.name for p in out.parent.iterdir()] == ["hop.mp4"]  # no partial file left


def test_a_plane_flight_as_a_gif_draws_its_track(make_flight, tmp_path):
    log = make_flight("plane")
    out = tmp_path / "plane.gif"
    film = render_flight(log, out, fps=5, speed=4)
    # 0.3..62.3 s of log at 4 log-s per film-s, 5 fps: a frame every 0.8 s of log
    assert (film.format, film.frames, film.width, film.height) == ("gif", 78, W // 2, H // 2)
    gif = Image.open(out)
    assert gif.format == "GIF" and gif.size == (W // 2, H // 2) and gif.n_frames == 78
    assert gif.info["duration"] == 200 and gif.info["loop"] == 0
    first = gif.convert("RGB")
    gif.seek(77)
    last = gif.convert("RGB")
    assert track_pixels(first) < 10 and track_pixels(last) > 180  # 400 m flown north: a track drawn
    gif.seek(40)
    assert 30 < track_pixels(gif) < track_pixels(last)
    key = Image.open(io.BytesIO(film.key_frame))
    assert track_pixels(key) > 400


def test_speed_fps_and_a_time_range(hop_log, tmp_path):
    film = render_flight(hop_log, tmp_path / "a.mp4", fps=5, speed=2.0)
    assert film.frames == 82  # 32.6 s of log at 0.4 s a frame
    meta, frames = read_mp4(tmp_path / "a.mp4")
    assert meta["fps"] == 5.0 and len(frames) == 82
    part = render_flight(hop_log, tmp_path / "b.mp4", t0=50, t1=60)
    assert 50 <= part.t0 < 50.2 and part.frames == int((60 - part.t0) * 10) + 1 and part.t1 <= 60
    assert len(read_mp4(tmp_path / "b.mp4")[1]) == part.frames


def test_a_long_flight_plays_faster_to_last_two_minutes(hop_log, tmp_path, monkeypatch):
    import sitlpool.logs.film as film_mod

    monkeypatch.setattr(film_mod, "MAX_FILM_S", 8.0)  # as a 2-minute cap on a 33 s log
    film = render_flight(hop_log, tmp_path / "c.mp4", fps=5)
    assert film.speed == pytest.approx(32.69 / 8.0, rel=0.01) and film.frames == 41


def test_a_truncated_log_is_filmed_up_to_the_damage(hop_log, tmp_path):
    cut = tmp_path / "cut.BIN"
    cut.write_bytes(hop_log.read_bytes()[:1_000_003])
    film = render_flight(cut, tmp_path / "cut.mp4", speed=5)
    assert film.end["status"] == "truncated" and 0 < film.frames < 66
    assert len(read_mp4(tmp_path / "cut.mp4")[1]) == film.frames


def test_a_kept_logs_id_names_it(hop_log, tmp_path):
    data = tmp_path / "data"
    src = tmp_path / "sitl" / "00000001.BIN"
    src.parent.mkdir()
    shutil.copyfile(hop_log, src)
    log_id = LogStore(data).keep(src, {"session": "abc"}).id
    film = render_flight(log_id, tmp_path / "k.gif", speed=10, data_dir=data)
    assert film.format == "gif" and film.frames == 33


@pytest.mark.parametrize(
    "kw, error, match",
    [
        ({"fps": 0}, LogError, "fps must be a whole number from 1 to 60"),
        ({"fps": 61}, LogError, "fps must be"),
        ({"fps": True}, LogError, "fps must be"),
        ({"fps": 2.5}, LogError, "fps must be"),
        ({"speed": 0}, LogError, "speed must be from 0.1 to 1000"),
        ({"speed": float("nan")}, LogError, "speed must be"),
        ({"speed": "2"}, LogError, "speed must be"),
        ({"format": "avi"}, LogError, "format must be one of mp4, gif"),
        ({"format": "gif", "fps": 30}, LogError, "a GIF plays at most 25 fps"),
        ({"t0": 60, "t1": 50}, TimeRangeError, "ends before it starts"),
        ({"t0": 500}, TimeRangeError, "no messages with a time in 500"),
        ({"t0": float("inf")}, TimeRangeError, "is not a number of seconds"),
        ({"speed": 0.1, "fps": 60, "t1": 1000}, LogError, "frames"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(hop_log, tmp_path, monkeypatch, kw, error, match):
    import sitlpool.logs.film as film_mod

    monkeypatch.setattr(film_mod, "MAX_FRAMES", 3000)  # 32.6 s at 0.1x and 60 fps: 19,561 frames
    with pytest.raises(error, match=match) as e:
        render_flight(hop_log, tmp_path / "x.mp4", **kw)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_logs_and_outputs_are_one_line(hop_log, tmp_path):
    junk = tmp_path / "junk.BIN"
    junk.write_text("not a log\n" * 10)
    with pytest.raises(NotALog, match="not a DataFlash log"):
        render_flight(junk, tmp_path / "x.mp4")
    with pytest.raises(UnknownLog, match="no log"):
        render_flight(tmp_path / "missing.BIN", tmp_path / "x.mp4")
    with pytest.raises(UnknownLog, match="no kept log"):
        render_flight("20260101-000000-abcdef", tmp_path / "x.mp4", data_dir=tmp_path / "data")
    header_only = tmp_path / "fmt.BIN"
    header_only.write_bytes(hop_log.read_bytes()[: 89 * 3])  # FMT messages only: nothing timed
    with pytest.raises(LogError, match="no timed messages to film"):
        render_flight(header_only, tmp_path / "x.mp4")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(LogError, match="cannot write the film to") as e:
        render_flight(hop_log, blocker / "x.mp4", speed=10)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "fmt.BIN", "junk.BIN"]


def test_an_encoder_failure_leaves_no_partial_file(hop_log, tmp_path, monkeypatch):
    """ffmpeg refusing its output (a format it cannot write there): one line, no .part left."""
    import sitlpool.logs.film as film_mod

    real = imageio_ffmpeg.write_frames

    def broken(path, size, **kw):
        kw["output_params"] = ["-f", "no-such-muxer"]
        return real(path, size, **kw)

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", broken)
    with pytest.raises(LogError, match="cannot write the film to") as e:
        film_mod.render_flight(hop_log, tmp_path / "x.mp4", speed=10)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_writes_a_film_and_refuses_in_one_line(hop_log, tmp_path):
    env = dict(os.environ, SITLPOOL_DATA_DIR=str(tmp_path / "data"))
    cli = [sys.executable, "-m", "sitlpool", "logs", "film"]
    r = subprocess.run(
        [*cli, str(hop_log), "-o", str(tmp_path / "f.gif"), "--speed", "8", "--fps", "4", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "gif" and doc["frames"] == 17 and doc["path"] == str(tmp_path / "f.gif")
    assert Image.open(tmp_path / "f.gif").n_frames == 17
    r = subprocess.run(
        [*cli, str(hop_log), "-o", str(tmp_path / "g.mp4"), "--speed", "0"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 2 and "speed must be a number at least 0.1" in r.stderr
    r = subprocess.run([*cli, "/etc/hostname", "-o", str(tmp_path / "g.mp4")], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "not a DataFlash log" in r.stderr


# ---- the MCP tool, over stdio ------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_tool_films_a_kept_log_and_refuses_paths(env, data_dir, tmp_path, hop_log):
    from mcp_client import ToolFailed, server

    src = tmp_path / "sitl" / "00000001.BIN"
    src.parent.mkdir()
    shutil.copyfile(hop_log, src)
    log_id = LogStore(data_dir).keep(src, {"session": "abc"}).id
    async with server(env) as call:
        r = await call.session.call_tool("render_flight", {"log_id": log_id, "speed": 4, "fps": 5})
        assert not r.is_error, " ".join(getattr(c, "text", "") for c in r.content)
        images = [c for c in r.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert Image.open(io.BytesIO(base64.b64decode(images[0].data))).size == (W, H)
        doc = json.loads(next(c.text for c in r.content if c.type == "text"))
        path = Path(doc["path"])
        assert path.parent == data_dir / "films" and path.name.startswith(log_id) and path.suffix == ".mp4"
        assert doc["log_id"] == log_id and doc["frames"] == 41 and doc["format"] == "mp4"
        assert len(read_mp4(path)[1]) == 41
        gif = await call("render_flight", log_id=log_id, format="gif", speed=10, fps=2)
        assert gif["format"] == "gif" and gif["frames"] == 7 and Image.open(gif["path"]).n_frames == 7
        for args, match in [
            ({"log_id": str(hop_log)}, "not a log id"),
            ({"log_id": "../../etc/passwd"}, "not a log id"),
            ({"log_id": "live:nosuch"}, "nosuch"),
            ({"log_id": log_id, "format": "avi"}, "format must be one of mp4, gif"),
            ({"log_id": log_id, "fps": 0}, "fps must be"),
            ({"log_id": log_id, "speed": -1}, "speed must be"),
            ({"log_id": log_id, "t0": 900}, "no messages with a time in 900"),
        ]:
            with pytest.raises(ToolFailed) as e:
                await call("render_flight", **args)
            text = str(e.value)
            assert match in text and "\n" not in text.strip(), (args, text)
    films = sorted(p.suffix for p in (data_dir / "films").iterdir())
    assert films == [".gif", ".mp4"]  # the refusals wrote nothing


@pytest.mark.anyio
async def test_the_mcp_tool_films_a_flying_sessions_live_log(env, instances, vehicle_binary):
    """``live:<session_id>``: the log a flying session writes, filmed up to its last whole message."""
    from mcp_client import server

    e = dict(env)
    if vehicle_binary is not None:
        e["SITLPOOL_SITL_BINARY"] = str(vehicle_binary)
    async with server(e) as call:
        sid = (await call("open_sitl", label="film-live", speedup=5))["session_id"]
        w = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=50)
        assert w["result"] == "met", w
        await call("set_mode", session_id=sid, mode="GUIDED")
        await call("arm", session_id=sid)
        await call("takeoff", session_id=sid, altitude_m=8)
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=7.5, timeout_s=40)
        assert w["result"] == "met", w
        listed = (await call("list_logs", session_id=sid))["live"]
        doc = await call("render_flight", log_id=f"live:{sid}", fps=5, speed=2) if listed else None
        await call("close_sitl", session_id=sid)
    if doc is None:  # skipped outside the client's task group (as tests/mcp/test_mcp_log_tools.py)
        pytest.skip("the vehicle wrote no DataFlash log after arming")
    assert doc["log_id"] == f"live:{sid}" and doc["frames"] > 3 and doc["end"]["status"] in ("truncated", "complete")
    path = Path(doc["path"])
    assert path.name.startswith(f"live-{sid}") and len(read_mp4(path)[1]) == doc["frames"]


def test_a_film_never_replaces_a_device_or_fifo_and_writes_through_a_symlink(hop_log, tmp_path):
    """``-o /dev/null`` as root once risked the machine's /dev/null (the film is written beside its
    output and renamed over it): a FIFO stands in for the device here. A symlink keeps being one."""
    import stat

    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    with pytest.raises(LogError, match="not a regular file"):
        render_flight(hop_log, fifo, speed=20, t0=50, t1=52)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    target, link = tmp_path / "real.mp4", tmp_path / "link.mp4"
    target.write_bytes(b"old")
    link.symlink_to(target)
    render_flight(hop_log, link, speed=20, t0=50, t1=52)
    assert link.is_symlink() and target.stat().st_size > 3
