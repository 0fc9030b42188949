"""SITLPOOL_* variables attacked a second time (issue 20, follow-up), after settings lost
pydantic: each bad value is refused in one line that names the variable and says what to
write, as pydantic-settings refused it (or better), never accepted as something else."""

import os
import subprocess
import sys

import pytest

from sitlpool.config import Settings, load_settings
from sitlpool.errors import ConfigError


@pytest.mark.parametrize("name", ["SPEEDUP", "READY_TIMEOUT_S", "IDLE_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["١٠", "１０", "٢٫٥"])
def test_numbers_in_other_scripts_are_refused(name, value):
    """float() reads Arabic-Indic and full-width digits; pydantic did not: '١٠' became 10."""
    with pytest.raises(ConfigError) as e:
        Settings({f"SITLPOOL_{name}": value})
    msg = str(e.value)
    assert msg.startswith(f"SITLPOOL_{name}: ") and "ASCII digits" in msg and "\n" not in msg, msg


def test_a_huge_pool_number_says_what_to_write():
    """5000 digits: Python's own 'Exceeds the limit (4300 digits) for integer string
    conversion ... use sys.set_int_max_str_digits()' came out, and no hint of a pool."""
    with pytest.raises(ConfigError) as e:
        Settings({"SITLPOOL_POOL": "4" * 5000})
    msg = str(e.value)
    assert msg.startswith("SITLPOOL_POOL: ") and 'SITLPOOL_POOL="40-59"' in msg, msg
    assert "set_int_max_str_digits" not in msg and len(msg) < 400, msg


def test_a_huge_value_is_not_repeated_in_full():
    with pytest.raises(ConfigError) as e:
        Settings({"SITLPOOL_SPEEDUP": "9" * 100_000})
    assert len(str(e.value)) < 300, len(str(e.value))


def test_two_spellings_with_two_values_are_refused():
    """SITLPOOL_POOL and sitlpool_pool both set: which one counted depended on the order of
    the environment (so two processes could read two pools); now neither, said in one line."""
    for env in ({"SITLPOOL_POOL": "41", "sitlpool_pool": "42"}, {"sitlpool_pool": "42", "SITLPOOL_POOL": "41"}):
        with pytest.raises(ConfigError) as e:
            Settings(env)
        msg = str(e.value)
        assert "SITLPOOL_POOL is set twice" in msg and "unset all but one" in msg, msg
    assert Settings({"SITLPOOL_POOL": "41", "Sitlpool_Pool": "41"}).pool == (41,)  # the same value is no conflict


@pytest.mark.parametrize("name", ["DATA_DIR", "LOCK_DIR", "SITL_BINARY"])
def test_a_blank_path_is_refused(name):
    """' ' was taken as a directory named ' ' in the current directory."""
    with pytest.raises(ConfigError) as e:
        Settings({f"SITLPOOL_{name}": "  "})
    assert str(e.value).startswith(f"SITLPOOL_{name}: ") and "give a path" in str(e.value)


def test_relative_paths_are_made_absolute(tmp_path, monkeypatch):
    """A relative SITLPOOL_SITL_BINARY passed the launcher's check (made in its working
    directory) and then failed to start in the SITL's own working directory."""
    monkeypatch.chdir(tmp_path)
    s = load_settings(data_dir="data", sitl_binary="bin/arducopter")
    assert s.data_dir == tmp_path / "data" and s.lock_dir == tmp_path / "data" / "leases"
    assert s.sitl_binary == tmp_path / "bin" / "arducopter"


def test_the_cli_says_it_in_one_line(tmp_path):
    env = dict(os.environ, SITLPOOL_DATA_DIR=str(tmp_path), SITLPOOL_SPEEDUP="１０")
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "status", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "SITLPOOL_SPEEDUP" in lines[0] and "ASCII digits" in lines[0], r.stderr
