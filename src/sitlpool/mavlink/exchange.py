"""One protocol exchange (mission, parameters) over the session's link: a listener that
queues the messages of the types it wants while the exchange runs, and is removed after."""

from __future__ import annotations

import queue
import time


class Inbox:
    """``with Inbox(link, {"MISSION_ACK", ...}) as box: ... box.get(timeout)``.

    The listener only puts into a queue: it never blocks the link thread."""

    def __init__(self, link, types: set[str], accept=None):
        self.link = link
        self.types = set(types)
        self.accept = accept  # optional filter fn(msg) -> bool, run on the link thread
        self.q: queue.SimpleQueue = queue.SimpleQueue()

    def __call__(self, m) -> None:
        if m.get_type() in self.types and (self.accept is None or self.accept(m)):
            self.q.put(m)

    def __enter__(self) -> Inbox:
        self.link.add_listener(self)
        return self

    def __exit__(self, *exc) -> None:
        self.link.remove_listener(self)

    def get(self, timeout: float):
        """The next wanted message, or None after ``timeout`` s (or at once if the link ended)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                return self.q.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.link.state in ("closed", "stopped"):
                    return None


def to_us(link):
    """A filter: messages addressed to this link (its system and component, or to everyone).
    Another GCS on another port may share our system id 255; its component tells it apart."""
    me = link.source_system
    comp = getattr(link, "source_component", None) or link._mav.srcComponent

    def accept(m) -> bool:
        return getattr(m, "target_system", 0) in (0, me) and getattr(m, "target_component", 0) in (0, comp)

    return accept
