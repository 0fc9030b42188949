"""`sitlpool ab --speedup nan` (or a time limit that is no duration) is a usage error: exit 2,
one line, and no batch directory written (docs/cli.md, docs/batch.md)."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "option", [["--speedup", "nan"], ["--speedup", "-5"], ["--time-limit", "nan"], ["--time-limit", "0"]]
)
def test_sitlpool_ab_refuses_a_number_that_cannot_fly(env, data_dir, tmp_path, option):
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"hold_s": 1}]))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"RTL_ALT": 1500}')
    b.write_text('{"RTL_ALT": 2000}')
    cmd = [sys.executable, "-m", "sitlpool", "ab", "--a", str(a), "--b", str(b), "--runs", "1", "--steps", str(steps)]
    r = subprocess.run([*cmd, *option], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and option[0] in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (data_dir / "batches").exists() or os.listdir(data_dir / "batches") == []
