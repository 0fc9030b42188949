"""A preset's values are checked as open_sitl checks them when the presets file is read: a
speedup of "fast" is one line naming the preset, in `sitlpool presets` and `sitlpool fly --preset`,
never a traceback."""

import json
import subprocess
import sys

import pytest

from sitlpool import presets
from sitlpool.errors import ConfigError

BAD = {
    "speedup-text": ('speedup = "fast"', "speedup"),
    "speedup-zero": ("speedup = 0", "speedup"),
    "model-number": ("model = 3", "model"),
    "params-text": ('params = { RTL_ALT = "high" }', "params"),
    "wipe-text": ('wipe = "yes"', "wipe"),
    "wait-negative": ("wait_s = -1", "wait_s"),
}


@pytest.mark.parametrize("line,named", list(BAD.values()), ids=list(BAD))
def test_a_preset_value_of_the_wrong_kind_is_refused_when_read(env, data_dir, line, named):
    (data_dir / "presets.toml").write_text(f"[x]\n{line}\n")
    with pytest.raises(ConfigError) as e:
        presets.load()
    msg = str(e.value)
    assert "preset 'x'" in msg and named in msg and "\n" not in msg, msg


def test_good_values_still_load(env, data_dir):
    (data_dir / "presets.toml").write_text(
        '[x]\nspeedup = 2.5\nmodel = "quad"\nhome = "CMAC"\nparams = { RTL_ALT = 1500, WPNAV_SPEED = "700" }\n'
        'wipe = false\nwait_s = 3\nparam_files = []\ninstance = 0\nlabel = "me"\n'
    )
    assert presets.load()["x"].values["speedup"] == 2.5


def test_sitlpool_fly_with_a_preset_speedup_of_text_is_one_line(env, data_dir, tmp_path):
    (data_dir / "presets.toml").write_text('[x]\nspeedup = "fast"\n')
    prog = tmp_path / "p.json"
    prog.write_text(json.dumps([{"hold_s": 1}]))
    for args in (["presets"], ["fly", str(prog), "--preset", "x"]):
        r = subprocess.run([sys.executable, "-m", "sitlpool", *args], env=env, capture_output=True, text=True)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "speedup" in r.stderr, r.stderr
