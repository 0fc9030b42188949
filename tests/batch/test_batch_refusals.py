"""Bad batch input is refused before anything flies, in one line that says what to do:
0 or 100000 runs, variants that differ in nothing, a binary that does not exist, unknown
metrics (the line names those that exist), bad steps; no batch directory is left behind."""

from __future__ import annotations

import json

import pytest

from sitlpool.batch import METRICS, BatchError, batch_fly, check_variants
from sitlpool.errors import SitlpoolError

STEPS = [{"tool": "arm"}, {"hold_s": 1}]
AB = {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}}


def refused(data_dir, **kw) -> str:
    args = {"variants": AB, "runs": 2, "steps": STEPS, **kw}
    with pytest.raises(BatchError) as e:
        batch_fly(**args)
    msg = str(e.value)
    assert "\n" not in msg
    assert not (data_dir / "batches").exists() or not any((data_dir / "batches").iterdir())
    return msg


@pytest.mark.parametrize("runs", [0, 100000, -1, 2.5, True, "10"])
def test_runs_out_of_range(env, data_dir, runs):
    assert "runs must be a whole number from 1 to 1000" in refused(data_dir, runs=runs)


def test_variants_that_differ_in_nothing(env, data_dir, tmp_path):
    same = {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"wpnav_speed_up": 250.0}}}
    assert "variants A and B differ in nothing" in refused(data_dir, variants=same)
    parm = tmp_path / "b.parm"
    parm.write_text("# B\nWPNAV_SPEED_UP 250\n")
    via_file = {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"param_files": [str(parm)]}}
    assert "differ in nothing" in refused(data_dir, variants=via_file)
    assert "at least two" in refused(data_dir, variants={"A": {"params": {"X": 1}}})


def test_a_binary_that_does_not_exist(env, data_dir, tmp_path):
    msg = refused(data_dir, variants={"A": {}, "B": {"binary": str(tmp_path / "nope/arducopter")}})
    assert "variant B: binary" in msg and "does not exist" in msg
    plain = tmp_path / "arducopter"
    plain.write_text("not a program")
    assert "is not an executable file" in refused(data_dir, variants={"A": {}, "B": {"binary": str(plain)}})


def test_unknown_metrics_name_those_that_exist(env, data_dir):
    msg = refused(data_dir, metrics=["time_to_alt_s", "tim_to_alt", "lap_time"])
    assert "'tim_to_alt', 'lap_time'" in msg
    assert all(m in msg for m in METRICS)


def test_bad_steps_and_other_arguments(env, data_dir):
    with pytest.raises(Exception) as e:  # the step vocabulary's own one-line error
        batch_fly(AB, 2, [{"tool": "fly_to_the_moon"}])
    assert "\n" not in str(e.value)
    assert "time_limit_s" in refused(data_dir, time_limit_s=0)
    assert "concurrency" in refused(data_dir, concurrency=0)
    assert "unknown key(s) parms" in refused(data_dir, variants={"A": {}, "B": {"parms": {"X": 1}}})


def test_parameter_files_are_read_and_hashed(tmp_path):
    f = tmp_path / "a.parm"
    f.write_text("WPNAV_SPEED_UP,150 # comment\n\nRTL_ALT 1500\n")
    (v,) = check_variants({"A": {"param_files": [str(f)], "params": {"RTL_ALT": 2000}}})
    assert v.params == {"WPNAV_SPEED_UP": 150.0, "RTL_ALT": 2000.0}  # the variant's params win over its files
    assert len(v.param_files[0]["sha256"]) == 64 and json.dumps(v.as_dict())
    bad = tmp_path / "bad.parm"
    bad.write_text("WPNAV_SPEED_UP fast\n")
    with pytest.raises(SitlpoolError, match="line 1"):
        check_variants({"A": {"param_files": [str(bad)]}})
