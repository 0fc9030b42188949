"""Telemetry logs (``.tlog``): every MAVLink message a link received or sent, each as an
8-byte big-endian count of microseconds since the Unix epoch followed by the message's raw
bytes, as MAVProxy and pymavlink's ``mavutil`` write them; read back by ``mavlogdump.py``,
MAVExplorer and ``mavutil.mavlink_connection(path)``. No pymavlink needed here."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

_STAMP = struct.Struct(">Q")
FLUSH_S = 1.0  # a live reader sees what was said at most this long ago


class TlogWriter:
    """Appends timestamped messages to one ``.tlog`` file; safe from several threads."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "ab")  # noqa: SIM115 - held open for the link's life, closed by close()
        self._lock = threading.Lock()
        self._flushed = time.monotonic()
        self.error: str | None = None

    def write(self, data: bytes, when: float | None = None) -> None:
        """Record one message's bytes (``when``: Unix time, now by default). A write error
        (a full disk) stops the recording, never the link: ``error`` says why."""
        stamp = _STAMP.pack(int((time.time() if when is None else when) * 1e6))
        with self._lock:
            if self._f.closed:
                return
            try:
                self._f.write(stamp + bytes(data))
                now = time.monotonic()
                if now - self._flushed >= FLUSH_S:
                    self._flushed = now
                    self._f.flush()
            except OSError as e:
                self.error = f"{self.path}: {e.strerror or e}"
                self._close()

    def _close(self) -> None:
        try:
            self._f.close()
        except OSError as e:
            self.error = self.error or f"{self.path}: {e.strerror or e}"

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._close()

    @property
    def closed(self) -> bool:
        return self._f.closed
