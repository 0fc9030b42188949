"""The built-in simulated vehicle: a stand-in for ArduPilot's SITL binary.

``python -m sitlpool.sim`` (console script ``sitlpool-sim``) takes SITL's flags, uses
SITL's ports and log lines, waits on SERIAL0 for its first client, serves one client
per TCP port, exits when its parent dies, keeps ``eeprom.bin`` and ``logs/`` in its
cwd, and flies a MAVLink copter (ArduCopter dialect) with simple kinematics.
It shares only ``sitlpool.instances`` with the rest of sitlpool.
"""
