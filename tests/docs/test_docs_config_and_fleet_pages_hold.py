"""What docs/configuration.md and docs/fleets.md say holds: settings are read by config.py's own
table (not pydantic-settings); an owner's runs of whitespace, newlines included, become one
space; the fleet install line is the README's; a loopback-only cluster is started through the
loopback patch the page names (a plain `ray start --node-ip-address 127.0.0.1` is not)."""

import subprocess
import sys
from pathlib import Path

import pytest

from sitlpool import config
from sitlpool.config import FIELDS
from sitlpool.errors import OwnerError
from sitlpool.leases._record import validate_owner

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
FLEETS = (ROOT / "docs" / "fleets.md").read_text()


def test_settings_are_read_by_config_pys_own_table():
    assert "read with\npydantic-settings" not in CONFIGURATION and "`sitlpool.config.FIELDS`" in CONFIGURATION
    assert FIELDS and "pydantic" not in " ".join(config.__dict__)
    out = subprocess.run(
        [sys.executable, "-c", "import sys, sitlpool.config; print('pydantic_settings' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_owner_whitespace_runs_become_one_space_as_the_page_says():
    assert "newlines and tabs included, become one space" in " ".join(CONFIGURATION.split())
    assert validate_owner("nightly\n  run\t(alice)") == "nightly run (alice)"
    with pytest.raises(OwnerError, match="control character"):
        validate_owner("nightly\x1b[31m")


def test_fleet_install_line_is_the_readmes():
    assert "pip install '.[ray]'" in (ROOT / "README.md").read_text()
    assert "pip install '.[ray]'" in FLEETS and "sitlpool[ray]" not in FLEETS


def test_the_loopback_recipe_uses_the_patch_that_exists():
    pytest.importorskip("ray")
    from sitlpool.fleet import _ray_loopback  # Ray is optional: imported only when it is there

    assert callable(_ray_loopback.apply) and "_ray_loopback.apply()" in FLEETS
    assert "is *not* loopback-only" in FLEETS and "SIGKILL the group" in FLEETS.replace("\n", " ")
