"""RC override over the session's one link. ArduPilot drops an override it has not heard
again for RC_OVERRIDE_TIME (3 s by default), so a small thread per link repeats it until it
is released (``{}``), its time runs out, or the link ends; then the channels are handed
back to the radio explicitly."""

from __future__ import annotations

import threading
import time
import weakref

from ..errors import ConfigError, MavlinkError
from .link import A
from .wire import number, show

REPEAT_S = 0.2
CHANNELS = 18
IGNORE, RELEASE_LOW, RELEASE_HIGH = 65535, 0, 65534  # chan1-8 release with 0, chan9-18 with UINT16_MAX-1
PWM_MIN, PWM_MAX = 800, 2200
MAX_SECONDS = 3600.0

_overrides: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _finite(value) -> bool:
    """A finite JSON number (an int too large for a float is not: it fails mid-send)."""
    try:
        number(value, "")
    except ConfigError:
        return False
    return True


def check_channels(channels) -> dict[int, int]:
    if not isinstance(channels, dict):
        raise ConfigError('channels is a record of channel number to PWM, e.g. {"3": 1700}; {} releases them')
    out = {}
    for k, v in channels.items():
        try:
            ch = int(k)
            if str(ch) != str(k).strip() and ch != k:
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"RC channel {show(k)} is not a channel number (1-{CHANNELS})") from None
        if not 1 <= ch <= CHANNELS:
            raise ConfigError(f"RC channel {show(ch)} does not exist; MAVLink overrides channels 1-{CHANNELS}")
        if not _finite(v) or not PWM_MIN <= v <= PWM_MAX:
            raise ConfigError(
                f"RC channel {ch}: {show(v)} is not a PWM value; use {PWM_MIN}-{PWM_MAX} µs (1500 is centre)"
            )
        out[ch] = int(round(v))
    return out


def _message(link, chans: dict[int, int], release: set[int]):
    vals = []
    for ch in range(1, CHANNELS + 1):
        if ch in chans:
            vals.append(chans[ch])
        elif ch in release:
            vals.append(RELEASE_LOW if ch <= 8 else RELEASE_HIGH)
        else:
            vals.append(IGNORE if ch <= 8 else 0)  # "leave it alone" (0 is ignore for 9-18)
    return A.MAVLink_rc_channels_override_message(link.vehicle.sysid or 1, 1, *vals)


class Override:
    """The channels held on one link, repeated by a daemon thread."""

    def __init__(self, link):
        self.link = link
        self.channels: dict[int, int] = {}
        self.until: float | None = None
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def set(self, chans: dict[int, int], seconds: float | None) -> None:
        released = set(self.channels) - set(chans)
        self.channels = dict(chans)
        self.until = None if seconds is None else time.monotonic() + seconds
        self.link.send(_message(self.link, self.channels, released))
        if chans and (self.thread is None or not self.thread.is_alive()):
            self.thread = threading.Thread(target=self._run, daemon=True, name=f"rc override {self.link.name}")
            self.thread.start()
        self.wake.set()

    def _run(self) -> None:
        while True:
            self.wake.wait(REPEAT_S)
            self.wake.clear()
            chans = self.channels
            if not chans:
                return
            if self.link.state in ("closed", "stopped"):
                self.channels = {}
                return
            try:
                if self.until is not None and time.monotonic() >= self.until:
                    self.channels = {}
                    self.link.send(_message(self.link, {}, set(chans)))
                    return
                self.link.send(_message(self.link, chans, set()))
            except MavlinkError:
                pass  # a send failed: the link reports the lost vehicle itself

    def status(self) -> dict:
        left = None if self.until is None or not self.channels else max(0.0, round(self.until - time.monotonic(), 1))
        return {"channels": {str(k): v for k, v in sorted(self.channels.items())}, "seconds_left": left}


def override(link, channels, seconds: float | None = None) -> dict:
    """Hold ``channels`` (``{3: 1700}``) until released with ``{}`` or ``seconds`` pass."""
    chans = check_channels(channels)
    if seconds is not None:
        if not _finite(seconds) or not 0 < seconds <= MAX_SECONDS:
            raise ConfigError(
                f"seconds {show(seconds)} is out of range; use more than 0 and at most {MAX_SECONDS:g}, "
                "or leave it out to hold until released with {}"
            )
    link.require_writable("RC override" if chans else "release the RC override")
    with _lock:
        o = _overrides.get(link)
        if o is None:
            o = _overrides[link] = Override(link)
    o.set(chans, seconds if chans else None)
    return {"released" if not chans else "holding": True, **o.status()}


def current(link) -> dict:
    o = _overrides.get(link)
    return o.status() if o else {"channels": {}, "seconds_left": None}
