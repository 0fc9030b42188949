"""``sitlpool fly FILE.json``: a step program run from the command line, its progress and
result printed (or the result as JSON), exit 0 when every step did what it asked, 1 (one
line) for a bad file, a bad step or a failed run."""

import json
import subprocess
import sys
from pathlib import Path

# `sitlpool fly` as the CLI registers it; until then (the registration line is the lead's) the
# same add_parser on a parser of its own
RUN = """
import sys
from sitlpool import cli
from sitlpool.cli import fly
p = cli.parser()
names = next(a for a in p._actions if a.dest == "command").choices
if "fly" not in names:
    p = cli.Parser(prog="sitlpool")
    fly.add_parser(p.add_subparsers(dest="command", required=True))
    cli.parser = lambda: p
sys.exit(cli.main(sys.argv[1:]))
"""

PROGRAM = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
    {"tool": "takeoff", "altitude_m": 3, "note": "takeoff arms when it must? no: arm first"},
]


def fly(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, "-c", RUN, "fly", *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_fly_a_program_file(env, instances, tmp_path):
    f = tmp_path / "hop.json"
    f.write_text(
        json.dumps(
            {
                "model": "quad",
                "speedup": 5,
                "steps": [
                    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
                    {"tool": "arm"},
                    {"tool": "takeoff", "altitude_m": 3},
                    {"tool": "wait_until", "condition": "altitude_above", "value": 2.8, "timeout_s": 30},
                    {"hold_s": 1},
                    {"tool": "land"},
                    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 60},
                ],
            }
        )
    )
    p = fly(env, f, "--speedup", 20)
    assert p.returncode == 0, p.stderr + p.stdout
    lines = p.stdout.splitlines()
    assert lines[0] == f"flying 7 steps from {f} (quad, speedup 20)"
    assert lines[1].startswith("  1/7 wait_until ready_to_arm: ok (sim ")
    assert lines[5].startswith("  5/7 hold 1 s: ok (sim ")
    assert lines[8].startswith("ok: 7/7 steps, ")
    assert any(line.startswith("  logs: ") for line in lines)
    recipe = next(line.split(": ", 1)[1] for line in lines if line.startswith("  recipe: "))
    assert json.loads(Path(recipe).read_text())["speedup"] == 20

    # the recipe it wrote is a program file too: --json prints the result document
    p = fly(env, recipe, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] is True and doc["steps_done"] == 7 and doc["log_ids"]


def test_bad_files_and_failed_runs_exit_1_with_one_line(env, instances, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"tool": "takeoff", "alt": 3}]))
    p = fly(env, bad)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == "sitlpool: step 1 (takeoff): unknown argument alt; takeoff takes altitude_m\n"
    bad.write_text("{not json")
    p = fly(env, bad)
    assert p.returncode == 1 and p.stderr.startswith(f"sitlpool: {bad} is not JSON: ")
    p = fly(env, tmp_path / "missing.json")
    assert p.returncode == 1 and p.stderr == f"sitlpool: {tmp_path / 'missing.json'}: No such file or directory\n"
    # a run that fails: takeoff before arming is refused by the vehicle
    bad.write_text(json.dumps(PROGRAM))
    p = fly(env, bad, "--speedup", 20)
    assert p.returncode == 1
    assert "  2/2 takeoff: FAILED: takeoff needs the vehicle armed" in p.stdout
    assert "FAILED: 1/2 steps" in p.stdout
