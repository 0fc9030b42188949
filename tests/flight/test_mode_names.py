"""Mode names as mavutil spells them, without importing mavutil."""

import subprocess
import sys

from pymavlink import mavutil

from sitlpool.mavlink import modes


def test_the_tables_are_mavutils_for_every_vehicle_type():
    for vehicle_type in modes._TABLE_OF:
        assert modes.mode_mapping(vehicle_type) == mavutil.mode_mapping_byname(vehicle_type), vehicle_type
    assert modes.mode_mapping(None) == mavutil.mode_mapping_byname(mavutil.mavlink.MAV_TYPE_QUADROTOR)
    # an unknown type gets a copter's names (name -> number, like every other table)
    assert modes.mode_mapping(250)["GUIDED"] == 4
    assert modes.mode_name(mavutil.mavlink.MAV_TYPE_FIXED_WING, 5) == "FBWA"
    assert modes.mode_name(mavutil.mavlink.MAV_TYPE_QUADROTOR, 77) == "MODE(77)"


def test_a_link_never_loads_mavutil_or_numpy():
    code = (
        "import sys; from sitlpool.mavlink.link import mode_mapping; mode_mapping(1); "
        "import sitlpool.flight, sitlpool.sessions; print('pymavlink.mavutil' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
