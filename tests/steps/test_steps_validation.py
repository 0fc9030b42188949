"""A step program is checked whole before anything is launched: one line for the first bad
step, naming the tools allowed or the tool's parameters; parameter files and recipes are read
or refused in one line."""

import json

import pytest

from sitlpool.steps import TOOLS, StepError, read_param_file, validate_steps
from sitlpool.steps import recipe as recipes

pytestmark = pytest.mark.quick


def refused(steps) -> str:
    with pytest.raises(StepError) as e:
        validate_steps(steps)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_good_program_gets_the_tools_defaults():
    plan = validate_steps(
        [
            {"tool": "arm"},
            {"tool": "takeoff", "altitude_m": 10, "note": "up"},
            {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60},
            {"hold_s": 2.5},
            {"tool": "set_params", "values": {"RTL_ALT": 1500}},
            {"tool": "land"},
        ]
    )
    assert plan[0] == ("arm", {"wait_ready_s": 20})
    assert plan[1] == ("takeoff", {"altitude_m": 10})
    assert plan[2] == ("wait_until", {"condition": "altitude_above", "value": 9.5, "timeout_s": 60})
    assert plan[3] == ("hold_s", {"hold_s": 2.5})


def test_an_unknown_tool_names_the_ones_allowed():
    msg = refused([{"tool": "arm"}, {"tool": "fly_to", "lat": 1}])
    assert msg.startswith("step 2: unknown tool 'fly_to'; steps may use ")
    for name in ("arm", "takeoff", "wait_until", "set_params", "upload_mission", "set_wind", "hold_s"):
        assert name in msg


def test_bad_arguments_name_the_tools_parameters():
    assert refused([{"tool": "takeoff", "alt": 10}]) == (
        "step 1 (takeoff): unknown argument alt; takeoff takes altitude_m"
    )
    assert refused([{"tool": "goto", "lat": 1, "lon": 2}]) == (
        "step 1 (goto): altitude_m missing; goto takes lat, lon, altitude_m"
    )
    msg = refused([{"tool": "takeoff", "altitude_m": "high"}])
    assert msg == "step 1 (takeoff): altitude_m 'high' is not a finite number; takeoff takes altitude_m"
    assert "is not a finite number" in refused([{"tool": "takeoff", "altitude_m": float("nan")}])
    assert "is not a finite number" in refused([{"tool": "takeoff", "altitude_m": True}])
    msg = refused([{"tool": "wait_until", "condition": "high_enough"}])
    assert "unknown condition 'high_enough'; use one of altitude_above" in msg
    assert "session_id is implied" in refused([{"tool": "land", "session_id": "abc"}])
    assert "inject_failure" in refused([{"tool": "inject_failure", "kind": "wings_fall_off"}])


def test_bad_holds_and_bad_programs():
    assert "hold_s -1 must be sim seconds" in refused([{"hold_s": -1}])
    assert "takes only hold_s" in refused([{"hold_s": 1, "altitude_m": 3}])
    assert "names no tool" in refused([{"altitude_m": 3}])
    assert "not an object" in refused(["takeoff"])
    assert refused([]) == "steps is empty: give at least one step"
    assert "must be a list" in refused({"tool": "arm"})
    assert "too many" in refused([{"hold_s": 0}] * 10001)


def test_the_vocabulary_covers_every_flight_tool():
    for name in (
        "snapshot arm disarm set_mode takeoff goto land rtl wait_until rc_override get_param set_param "
        "get_params set_params upload_mission download_mission clear_mission start_mission mission_status "
        "set_wind wind_history list_failures inject_failure clear_failure set_speedup"
    ).split():
        assert name in TOOLS


def test_parameter_files_by_content_hash(tmp_path):
    f = tmp_path / "a.parm"
    f.write_text("# tuned\nWPNAV_SPEED_UP 250\nRTL_ALT,1500 # cm\n\n")
    got = read_param_file(f)
    assert got["values"] == {"WPNAV_SPEED_UP": 250.0, "RTL_ALT": 1500.0}
    assert len(got["sha256"]) == 64
    f.write_text("WPNAV_SPEED_UP 250\nRTL_ALT\n")
    with pytest.raises(Exception, match="line 2: 'RTL_ALT' is not 'NAME VALUE'"):
        read_param_file(f)
    with pytest.raises(Exception, match="No such file"):
        read_param_file(tmp_path / "missing.parm")


def test_recipes_are_read_from_a_dict_a_text_or_a_file(tmp_path):
    doc = {"schema": 1, "steps": [{"hold_s": 1}], "model": "quad", "speedup": 5, "params": {"RTL_ALT": 1500}}
    p = tmp_path / "recipe.json"
    p.write_text(json.dumps(doc))
    assert recipes.load(doc) == recipes.load(json.dumps(doc)) == recipes.load(str(p)) == doc
    assert recipes.open_options(doc) == {"model": "quad", "speedup": 5, "home": None, "params": {"RTL_ALT": 1500}}
    with pytest.raises(StepError, match="an object with its steps"):
        recipes.load({"model": "quad"})
