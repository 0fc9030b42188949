import subprocess
import sys

import pytest

from sitlpool.config import (
    SETTINGS_FIELDS,
    ValidatedSettings,
    env_paths,
    format_pool,
    load_settings,
    parse_pool,
    settings_values,
)
from sitlpool.errors import ConfigError
from sitlpool.instances import MAX_INSTANCE, ports


def test_pool_forms():
    assert parse_pool("40-59") == tuple(range(40, 60))
    assert parse_pool("40,41,45-47") == (40, 41, 45, 46, 47)
    assert parse_pool(" 42 , 40 ,") == (42, 40)  # order kept; a trailing comma is harmless
    assert format_pool(parse_pool("40,41,45-47")) == "40-41,45-47"
    assert format_pool(range(40, 60)) == "40-59"


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "is empty"),
        (",,", "is empty"),
        ("forty", "not a number"),
        ("40-x", "not a number"),
        ("59-40", "backwards"),
        ("40,40", "appears twice"),
        ("38-42,41", "appears twice"),
        ("0-3", "ArduPilot's own tools"),
        ("10-20", "VNC"),
        (f"{MAX_INSTANCE + 1}", "past 65535"),
    ],
)
def test_bad_pools_say_what_to_write(text, words):
    with pytest.raises(ConfigError) as e:
        parse_pool(text)
    msg = str(e.value)
    assert words in msg
    assert text in msg or text == ""
    assert "write" in msg or "leave" in msg


def test_highest_instance_fits_in_16_bits():
    assert ports(MAX_INSTANCE).sim_in <= 65535
    assert parse_pool(str(MAX_INSTANCE)) == (MAX_INSTANCE,)


def test_settings_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SITLPOOL_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SITLPOOL_LOCK_DIR", raising=False)
    monkeypatch.setenv("SITLPOOL_POOL", "100,102-103")
    s = load_settings()
    assert s.data_dir == tmp_path and s.lock_dir == tmp_path / "leases"
    assert s.pool == (100, 102, 103)
    assert env_paths() == (tmp_path, tmp_path / "leases")
    monkeypatch.setenv("SITLPOOL_LOCK_DIR", str(tmp_path / "shared"))
    assert load_settings().lock_dir == tmp_path / "shared"
    assert env_paths()[1] == tmp_path / "shared"


def test_validated_settings_carry_every_field_of_settings(monkeypatch, tmp_path):
    """What a fleet actor gets instead of reading Settings itself: the same values, the same
    attributes (both are made from one table of fields, ``config.FIELDS``)."""
    from sitlpool.config import Settings

    assert SETTINGS_FIELDS == tuple(Settings.model_fields)
    monkeypatch.setenv("SITLPOOL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SITLPOOL_POOL", "100,102-103")
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(tmp_path / "arducopter"))
    monkeypatch.setenv("SITLPOOL_SPEEDUP", "7")
    s = load_settings()
    values = settings_values(s)
    import json

    assert json.loads(json.dumps(values)) == values  # plain data: it travels between processes
    v = ValidatedSettings(values)
    for f in SETTINGS_FIELDS:
        assert getattr(v, f) == getattr(s, f) and type(getattr(v, f)) is type(getattr(s, f)), f
    assert v.sessions_dir == s.sessions_dir
    plane = v.model_copy(update={"sitl_binary": tmp_path / "arduplane"})
    assert plane.sitl_binary == tmp_path / "arduplane" and plane.pool == s.pool and v.sitl_binary == s.sitl_binary
    with pytest.raises(ConfigError, match="without pool.*settings_values"):
        ValidatedSettings({k: x for k, x in values.items() if k != "pool"})


def test_bad_setting_is_a_config_error(monkeypatch):
    monkeypatch.setenv("SITLPOOL_POOL", "59-40")
    with pytest.raises(ConfigError, match="SITLPOOL_POOL.*backwards"):
        load_settings()


def test_bad_setting_on_cli_is_one_line(env):
    env = dict(env, SITLPOOL_POOL="1,2,x")
    r = subprocess.run([sys.executable, "-m", "sitlpool.leases", "status"], env=env, capture_output=True, text=True)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "'x' is not a number" in lines[0] and "Traceback" not in r.stderr


def test_ports_layout():
    p = ports(0)
    assert (p.serial0, p.serial1, p.serial2, p.rc_in, p.sim_out, p.sim_in) == (5760, 5762, 5763, 5501, 9002, 9003)
    p = ports(40)
    assert (p.serial0, p.serial1, p.serial2, p.rc_in, p.sim_out, p.sim_in) == (6160, 6162, 6163, 5901, 9402, 9403)
    assert p.tcp == (6160, 6162, 6163) and p.udp == (5901, 9402, 9403)


def test_one_settings_form_without_pydantic(env, tmp_path):
    """Settings, the fast path and the fleet's carried values are one class made from one table:
    reading them imports no pydantic, and ValidatedSettings checks what it is given."""
    from sitlpool.config import FIELDS, Settings

    assert issubclass(ValidatedSettings, Settings) and SETTINGS_FIELDS == tuple(f.name for f in FIELDS)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sitlpool.config import load_settings; load_settings(); "
            "print(sorted(m for m in sys.modules if m.startswith('pydantic')))",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    values = settings_values(load_settings())
    with pytest.raises(ConfigError, match="^SITLPOOL_SPEEDUP: "):
        ValidatedSettings({**values, "speedup": float("inf")})
    with pytest.raises(ConfigError, match="^SITLPOOL_POOL: .*backwards"):
        load_settings().model_copy(update={"pool": "59-40"})
    s = load_settings(pool="100,102", sitl_binary=str(tmp_path / "x"), data_dir=tmp_path)
    assert s.pool == (100, 102) and s.sitl_binary == tmp_path / "x" and s.lock_dir == tmp_path / "leases"
    assert load_settings(pool=[100, 101]).pool == (100, 101)


@pytest.mark.parametrize("name", ["SITLPOOL_SPEEDUP", "SITLPOOL_READY_TIMEOUT_S", "SITLPOOL_IDLE_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["0", "-1", "x", "1e400", "nan", "true"])
def test_bad_numbers_are_config_errors(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}: "):
        load_settings()


def test_settings_names_are_case_insensitive_and_empty_is_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("sitlpool_data_dir", str(tmp_path))
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", "")
    monkeypatch.delenv("SITLPOOL_DATA_DIR", raising=False)
    s = load_settings()
    assert s.data_dir == tmp_path and s.sitl_binary is None and s.speedup == 1.0
