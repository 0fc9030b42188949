"""The built-in simulated vehicle: a stand-in for ArduPilot's SITL binary.

``python -m sitlpool.sim`` (console script ``sitlpool-sim``) takes SITL's flags, uses
SITL's ports and log lines, waits on SERIAL0 for its first client, serves one client
per TCP port, exits when its parent dies, keeps ``eeprom.bin`` and ``logs/`` in its
cwd, and flies a MAVLink copter that answers ground stations as ArduCopter 4.7.0-dev SITL does
(its boot timeline, messages, streams, commands, modes, mission protocol, parameters, MAVFTP
parameter file), with simple kinematics instead of physics.

Modules: ``server`` (ports, links, the main loop, MAVLink in: a table per message type),
``commands`` (MAV_CMD -> handler), ``mission_protocol`` (upload/download, items stored as
AP_Mission stores them), ``links`` (a served client), ``telemetry`` (messages and stream
groups), ``copter`` (the vehicle, in layers: ``state`` < ``sensors`` < ``navigation`` <
``mission`` < ``actions`` < ``copter``; ArduCopter's tables in ``rules``, places in ``geo``),
``observers`` (the hook a flight log writer attaches to), ``params``/``params47``
(ArduCopter 4.7's parameter table, eeprom.bin), ``ftp`` (MAVFTP).
It shares only ``sitlpool.instances`` with the rest of sitlpool.
"""
