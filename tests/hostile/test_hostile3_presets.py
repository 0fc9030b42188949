"""Hostile pass 3 on presets: the default presets file lives in the data dir, which a group may
share (docs/security.md). A presets.toml others can write lets them choose the parameters,
homes and parameter files of your sessions (ARMING_CHECK 0, failsafes off); a FIFO planted
under that name hangs every reader (list_presets, `sitlpool presets`, open_sitl(preset=...)).
sitlpool refuses both elsewhere (toolcache: a file writable by nobody else; pidfiles.read_regular:
never a FIFO); the presets file must be read the same way: one line naming the file, no hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sitlpool import presets
from sitlpool.errors import ConfigError

PRESET = '[mine]\nmodel = "quad"\nparams = { ARMING_CHECK = 0, FS_THR_ENABLE = 0 }\n'


def test_a_presets_file_others_can_write_is_refused(env, data_dir):
    f = data_dir / "presets.toml"
    f.write_text(PRESET)
    f.chmod(0o666)
    with pytest.raises(ConfigError) as e:
        presets.open_options("mine")
    msg = str(e.value)
    assert str(f) in msg and "writ" in msg and "\n" not in msg, msg


def test_a_fifo_planted_as_the_presets_file_never_hangs_a_reader(env, data_dir):
    os.mkfifo(data_dir / "presets.toml")
    code = "from sitlpool import presets\ntry:\n    presets.listing()\nexcept Exception as e:\n    print(e)\n"
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO named presets.toml hangs (list_presets, sitlpool presets, open_sitl(preset=))")
    assert "presets" in r.stdout and "\n" not in r.stdout.strip(), r.stdout + r.stderr
