"""Waking a waiter when a lease may have freed: inotify on the lock directory."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from typing import Any


class Inotify:
    """Wakes a waiter when any lock file is closed after writing (a release or a death).
    Without inotify (or if it fails) ``wait`` simply sleeps."""

    IN_CLOSE_WRITE = 0x00000008
    _libc: Any = None

    def __init__(self, directory: Path):
        self.fd = -1
        try:
            if Inotify._libc is None:
                # imported here: ctypes.util (shutil, subprocess) is ~30 ms of every `leases status`
                import ctypes
                import ctypes.util

                Inotify._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc = Inotify._libc
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory), self.IN_CLOSE_WRITE) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float) -> None:
        if self.fd < 0:
            time.sleep(timeout)
            return
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            try:
                os.read(self.fd, 65536)
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
