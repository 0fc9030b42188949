"""How many runs of a local batch fly at once: as many as the machine's CPU carries.

A run mostly waits on sim time (a 60-sim-second program at speedup 10 is 6 s of wall time
whatever the CPU does), so one run per core leaves the cores idle: the built-in vehicle costs
a few % of a core, a real ArduCopter at speedup 10 a good part of one. ``Pace`` measures what
the runs in flight cost (the CPU seconds of their SITL processes, read from ``/proc``, plus
this process's own: links, log summaries, metrics) over each sample, per run, and admits as
many runs as fit in ``CPU_BUDGET`` of the cores. It starts at one run per core (the old
default) and grows by at most one core's worth of runs a sample (a slow start: launches cost
more than flying), shrinks at once when runs get dearer, and never goes above the pool's
free instances at the start of the batch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable

CPU_BUDGET = 0.75  # of the machine's cores a batch may fill with its runs
SAMPLE_S = 1.0  # how often the runs in flight are measured
MIN_SAMPLE_RUNS_S = 2.0  # run-seconds a sample needs before its share is believed
MAX_AUTO = 64  # runs at once at most, however cheap they are
SMOOTH = 0.5  # weight of the newest sample in the running share
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of a live process (``/proc/<pid>/stat`` fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()  # comm may hold spaces and parentheses
    try:
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (IndexError, ValueError):
        return None


class Pace:
    """The number of runs a batch may have in flight, measured as it flies.

    ``limit``: runs allowed at once now. ``share``: CPU cores one run costs (None until
    measured). ``pids()`` gives the SITL pids of the runs in flight; ``in_flight()`` their
    number. ``start()`` samples on a thread until ``stop()``."""

    def __init__(
        self,
        cap: int,
        pids: Callable[[], Iterable[int]],
        in_flight: Callable[[], int],
        cores: int | None = None,
        on_change: Callable[[int], None] | None = None,
    ):
        self.cores = cores or os.cpu_count() or 1
        self.cap = max(1, min(cap, MAX_AUTO))
        self.limit = min(self.cap, self.cores)
        self.share: float | None = None
        self.peak = self.limit
        self._pids, self._in_flight, self._on_change = pids, in_flight, on_change
        self._last: dict[int, float] = {}  # pid -> CPU seconds at the last sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batch pace", daemon=True)
        self.changed = threading.Condition()

    def start(self) -> Pace:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        t_last, own_last = time.monotonic(), time.process_time()
        runs_s = 0.0  # run-seconds in flight since the share was last updated
        cpu = 0.0  # CPU seconds they cost
        while not self._stop.wait(SAMPLE_S):
            now, own = time.monotonic(), time.process_time()
            dt = now - t_last
            n = self._in_flight()
            seen: dict[int, float] = {}
            for pid in list(self._pids()):
                c = cpu_seconds(pid)
                if c is None:
                    continue
                seen[pid] = c
                cpu += c - self._last.get(pid, c)  # a new pid counts from its first sample
            self._last = seen
            cpu += own - own_last
            runs_s += n * dt
            t_last, own_last = now, own
            if runs_s >= MIN_SAMPLE_RUNS_S and n:
                self.observe(cpu / runs_s)
                runs_s = cpu = 0.0

    def observe(self, share: float) -> int:
        """One measured share (cores per run): the new limit."""
        share = max(share, 1e-3)
        self.share = share if self.share is None else SMOOTH * share + (1 - SMOOTH) * self.share
        fit = max(1, int(self.cores * CPU_BUDGET / self.share))
        new = min(self.cap, fit, self.limit + self.cores)  # grow by a core's worth of runs at most
        if new != self.limit:
            with self.changed:
                self.limit = new
                self.peak = max(self.peak, new)
                self.changed.notify_all()
            if self._on_change is not None:
                self._on_change(new)
        return self.limit
