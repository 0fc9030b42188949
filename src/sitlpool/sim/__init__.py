"""The built-in simulated vehicle: a stand-in for ArduPilot's SITL binary.

``python -m sitlpool.sim`` (console script ``sitlpool-sim``) takes SITL's flags, uses
SITL's ports and log lines, waits on SERIAL0 for its first client, serves one client
per TCP port, exits when its parent dies, keeps ``eeprom.bin`` and ``logs/`` in its
cwd, and flies a MAVLink copter that answers ground stations as ArduCopter 4.7.0-dev SITL does
(its boot timeline, messages, streams, commands, modes, mission protocol, parameters, MAVFTP
parameter file), with simple kinematics instead of physics. Modules: ``copter`` (state, rules,
flight), ``telemetry`` (messages and stream groups), ``server`` (ports, links, MAVLink in),
``params``/``params47`` (ArduCopter 4.7's parameter table, eeprom.bin), ``ftp`` (MAVFTP).
It shares only ``sitlpool.instances`` with the rest of sitlpool.
"""
