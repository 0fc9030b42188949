"""``sitlpool ab``: variants from a JSON parameter object and a parameter file, steps from a
JSON file; the table and verdict on stdout (``--json``: the comparison), the picture with
``-o``; a variant file that does not exist is one line. Run through the command's own parser
and handler (``sitlpool.cli.ab.add_parser``)."""

from __future__ import annotations

import json

import pytest

from sitlpool.cli import ab
from sitlpool.cli._common import Parser
from sitlpool.errors import SitlpoolError

STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


def run(*argv: str) -> int:
    p = Parser(prog="sitlpool")
    ab.add_parser(p.add_subparsers())
    a = p.parse_args(["ab", *argv])
    return a.fn(a)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"WPNAV_SPEED_UP": 250}))
    (tmp_path / "b.parm").write_text("# slow climb\nWPNAV_SPEED_UP 100\n")
    (tmp_path / "steps.json").write_text(json.dumps(STEPS))
    return tmp_path


def test_ab_prints_the_table_and_writes_the_picture(env, files, capsys):
    png = files / "ab.png"
    args = ["--a", str(files / "a.json"), "--b", str(files / "b.parm"), "--runs", "2"]
    args += ["--steps", str(files / "steps.json"), "--speedup", "20", "--metrics", "time_to_alt_s", "-o", str(png)]
    assert run(*args) == 0
    out = capsys.readouterr().out
    assert "time_to_alt_s" in out and "significant" in out and "files: " in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert run(*args[:-2], "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == {"A": 2, "B": 2} and doc["metrics"]["time_to_alt_s"]["B"]["n"] == 2


def test_ab_bad_input_is_one_line(env, files):
    with pytest.raises(SitlpoolError, match="variant file .*nope.json does not exist"):
        run(
            "--a",
            str(files / "nope.json"),
            "--b",
            str(files / "b.parm"),
            "--runs",
            "2",
            "--steps",
            str(files / "steps.json"),
        )
    with pytest.raises(SitlpoolError, match="give two variants"):
        run("--a", str(files / "a.json"), "--runs", "2", "--steps", str(files / "steps.json"))
    with pytest.raises(SitlpoolError, match="runs must be a whole number"):
        run(
            "--a",
            str(files / "a.json"),
            "--b",
            str(files / "b.parm"),
            "--runs",
            "0",
            "--steps",
            str(files / "steps.json"),
        )
