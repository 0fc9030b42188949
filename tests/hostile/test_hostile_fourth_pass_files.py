"""Hostile pass 4 on the files people hand to sitlpool (one case flies the built-in vehicle).

`sitlpool mission convert -o OUT` wrote a temporary file and renamed it over OUT: a FIFO or a
device (`-o /dev/null`, run as root, turned /dev/null into a regular file for the whole machine)
was replaced instead of written into, a symlink was replaced by a file (its target left as it
was), and `-o ""` ended in a traceback. `sitlpool fly FILE` and `steps.repro(recipe=PATH)` read
the file whole with no limit: a symlink to /dev/zero ate memory until MemoryError, a FIFO hung for
ever, a UTF-8 BOM (Windows editors) was "not JSON", deep nesting a traceback. Also: a .plan whose
hoverSpeed is NaN, Infinity or a word was taken and written back as is (`Infinity` is not JSON to
QGroundControl); a run whose `<data_dir>/runs` is a file logged a traceback; an agent's parameter
file name with a NUL let a raw ValueError out."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sitlpool.cli import main
from sitlpool.cli.fly import read_program
from sitlpool.errors import ConfigError

PROGRAM = '[{"command": "takeoff", "alt_m": 10}, {"command": "rtl"}]'


@pytest.fixture
def hop(tmp_path) -> Path:
    p = tmp_path / "hop.json"
    p.write_text(PROGRAM)
    return p


def test_convert_into_a_fifo_writes_into_it_and_keeps_it(tmp_path, hop, capsys):
    fifo = tmp_path / "out.plan"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader there: opening it to write does not block
    try:
        assert main(["mission", "convert", str(hop), "--to", "plan", "-o", str(fifo)]) == 0, capsys.readouterr().err
        got = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert Path(fifo).is_fifo(), "the FIFO was replaced by a file"
    assert '"fileType": "Plan"' in got


def test_convert_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path, hop, capsys):
    target, link = tmp_path / "real.plan", tmp_path / "link.plan"
    target.write_text("old\n")
    link.symlink_to(target.name)
    assert main(["mission", "convert", str(hop), "--to", "plan", "-o", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink()
    assert '"fileType": "Plan"' in target.read_text()


@pytest.mark.parametrize("out", ["", "a-dir", "a-dir/"])
def test_convert_to_no_file_name_is_one_line(tmp_path, hop, capsys, out):
    (tmp_path / "a-dir").mkdir()
    assert main(["mission", "convert", str(hop), "--to", "plan", "-o", out]) == 1
    e = capsys.readouterr().err.strip()
    assert e.startswith("sitlpool: cannot write") and "\n" not in e, e
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "hop.json"]  # no temporary file left
    assert not any((tmp_path / "a-dir").iterdir())


@pytest.fixture(autouse=True)
def _cwd(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)


READ = """
import sys
from sitlpool.cli.fly import read_program
from sitlpool.errors import SitlpoolError
from sitlpool.steps.recipe import load
for path in sys.argv[1:]:
    for read in (read_program, load):
        try:
            read(path)
            print("read", path)
        except SitlpoolError as e:
            print(e)
"""


def _small_memory():  # a reader that reads /dev/zero whole fails here, not on the machine
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))


def test_fly_and_repro_refuse_a_fifo_and_dev_zero_in_one_line_each(tmp_path):
    """``sitlpool fly FILE`` and ``steps.repro(recipe=PATH)``."""
    fifo, zero = tmp_path / "fifo.json", tmp_path / "zero.json"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    r = subprocess.run(
        [sys.executable, "-c", READ, str(fifo), str(zero)],
        capture_output=True,
        text=True,
        timeout=60,  # the FIFO used to block for ever
        preexec_fn=_small_memory,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    assert all("is not a regular file" in line for line in lines), lines


def test_fly_reads_a_program_with_a_utf8_bom(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(b'\xef\xbb\xbf[{"hold_s": 1}]')
    assert read_program(str(p)) == ([{"hold_s": 1}], {})


def test_a_recipe_nested_too_deeply_is_one_line(tmp_path):
    from sitlpool.steps.recipe import load
    from sitlpool.steps.vocabulary import StepError

    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    (tmp_path / "deep.json").write_text(deep)
    for given in (deep, str(tmp_path / "deep.json")):
        with pytest.raises(StepError, match="nested too deeply"):
            load(given)


@pytest.mark.parametrize("value", ["NaN", "Infinity", '"fast"'])
def test_a_plan_with_a_speed_that_is_no_number_is_refused(tmp_path, value):
    from sitlpool.cli.mission import load

    plan = tmp_path / "speed.plan"
    plan.write_text(
        '{"fileType": "Plan", "version": 1, "groundStation": "QGroundControl", "mission": {"version": 2, '
        f'"firmwareType": 3, "vehicleType": 2, "cruiseSpeed": 15, "hoverSpeed": {value}, "items": []}}}}'
    )
    with pytest.raises(ConfigError) as e:
        load(str(plan))
    assert "hoverSpeed" in str(e.value) and "\n" not in str(e.value)


def test_a_run_whose_runs_folder_is_a_file_says_so_in_one_line(env, instances, caplog):
    from sitlpool import steps
    from sitlpool.leases import LeasePool

    runs = Path(env["SITLPOOL_DATA_DIR"]) / "runs"
    runs.write_text("not a folder\n")
    r = steps.fly([{"hold_s": 1}], speedup=20)
    assert [o.ok for o in r.outcomes] == [True]
    assert LeasePool(Path(env["SITLPOOL_DATA_DIR"]) / "leases", instances).status() == []
    assert runs.read_text() == "not a folder\n"
    assert r.recipe is None and r.error and str(runs) in r.error and "\n" not in r.error
    assert not [rec.getMessage() for rec in caplog.records if rec.exc_info], "a traceback was logged"


def test_an_agents_param_file_name_with_a_nul_is_one_clear_refusal(tmp_path, monkeypatch):
    from mcp.server.mcpserver.exceptions import ToolError

    from sitlpool.config import load_settings
    from sitlpool.server.tools.sessions import agent_param_files

    monkeypatch.setenv("SITLPOOL_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SITLPOOL_ALLOW_PATHS", raising=False)
    monkeypatch.delenv("SITLPOOL_PRESETS", raising=False)
    with pytest.raises(ToolError, match="param_files"):
        agent_param_files(load_settings(), ["copter\0.parm"])
