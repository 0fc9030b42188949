"""The fleet's errors: all ``SitlpoolError``s, one line each (what, to what, what to do)."""

from __future__ import annotations

from ..errors import NoFreeInstance, ProcessError, SitlpoolError


class FleetError(SitlpoolError):
    """The Ray cluster cannot be used as asked (not reachable, no ``sitl`` resource, ...)."""


class SitlDied(ProcessError):
    """The actor or node of a RemoteSitl died: every call on it says so, with Ray's reason."""


class NoRoom(NoFreeInstance):
    """No node of the cluster has a free ``sitl`` slot (and the caller asked not to wait)."""


class ItemFailed(SitlpoolError):
    """One ``map`` item's failure, returned as that item's result (never raised by ``map``).

    ``type``/``message``/``traceback``: what ``fn`` raised; ``texts``: the vehicle's last
    STATUSTEXTs; ``stderr_tail``: the SITL's stderr; ``host``/``node_id``/``instance``: where;
    ``logs``: the records of the logs its flight left there (``map(..., keep_logs=True)``)."""

    def __init__(self, index: int, item, info: dict):
        self.index = index
        self.item = item
        self.type = info.get("type", "")
        self.error = info.get("message", "")
        self.traceback = info.get("traceback", "")
        self.texts = list(info.get("texts") or [])
        self.stderr_tail = info.get("stderr_tail", "")
        self.host = info.get("host")
        self.node_id = info.get("node_id")
        self.instance = info.get("instance")
        self.attempts = info.get("attempts", 1)
        self.logs = list(info.get("logs") or [])  # map(..., keep_logs=True): the records of its flight's logs
        where = f" on {self.host} instance {self.instance}" if self.host else ""
        super().__init__(f"item {index} failed{where}: {self.type}: {self.error}")

    def __reduce__(self):
        return (_item_failed, (self.index, self.item, self.as_dict()))

    def as_dict(self) -> dict:
        return {
            "type": self.type,
            "message": self.error,
            "traceback": self.traceback,
            "texts": self.texts,
            "stderr_tail": self.stderr_tail,
            "host": self.host,
            "node_id": self.node_id,
            "instance": self.instance,
            "attempts": self.attempts,
            "logs": self.logs,
        }


def _item_failed(index, item, info):
    return ItemFailed(index, item, info)
