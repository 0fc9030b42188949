"""A served client (one TCP serial port), and what the MAVLink handlers need of the simulator."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Protocol

from .copter import Copter


@dataclass
class Upload:
    """A mission upload in progress on one link (ArduPilot pulls the items one by one)."""

    count: int
    to: tuple[int, int]  # the uploader's system and component
    last: float  # sim time of the last item received (or of the count)
    asked: float  # sim time of the last MISSION_REQUEST sent
    items: list = field(default_factory=list)


@dataclass
class Link:
    """One served TCP client on one serial port."""

    name: str
    sock: socket.socket
    parser: Any  # pymavlink MAVLink objects: one parses what comes in, one numbers what goes out
    encoder: Any
    # ArduCopter 4.7 streams nothing but HEARTBEAT on any port until a client asks
    # (REQUEST_DATA_STREAM, SET_MESSAGE_INTERVAL): Hz of sim time per message name
    rates: dict[str, float] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    hb_interval: float = 1.0
    out: bytearray = field(default_factory=bytearray)
    upload: Upload | None = None
    active: bool = False  # has sent us MAVLink: ArduPilot sends STATUSTEXTs only to such links
    warned: set = field(default_factory=set)


class Host(Protocol):
    """The simulator as the command and mission handlers see it."""

    copter: Copter

    def send(self, msg: Any, link: Link | None = None) -> None: ...

    def msg(self, name: str) -> Any: ...

    def banner(self) -> None: ...
