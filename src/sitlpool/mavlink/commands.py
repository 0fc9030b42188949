"""Commands and what a vehicle answers them: COMMAND_ACK results by name, the refusal that
carries the vehicle's own reasons."""

from __future__ import annotations

from pymavlink.dialects.v20 import ardupilotmega as A

from ..errors import MavlinkError

RESULTS = {
    A.MAV_RESULT_ACCEPTED: "accepted",
    A.MAV_RESULT_TEMPORARILY_REJECTED: "temporarily rejected",
    A.MAV_RESULT_DENIED: "denied",
    A.MAV_RESULT_UNSUPPORTED: "unsupported",
    A.MAV_RESULT_FAILED: "failed",
    A.MAV_RESULT_IN_PROGRESS: "in progress",
}


class CommandRefused(MavlinkError):
    """The vehicle answered a command with something other than ACCEPTED. ``texts`` holds
    only what it said after the command was sent (its reasons, if it gave any)."""

    def __init__(self, message: str, what: str = "", result: int | None = None, texts: list[str] | None = None):
        super().__init__(message)
        self.what, self.result, self.texts = what, result, list(texts or [])

    @property
    def result_name(self) -> str:
        return RESULTS.get(self.result, str(self.result))


def cmd_name(cmd: int) -> str:
    e = A.enums["MAV_CMD"].get(cmd)
    return e.name.replace("MAV_CMD_", "").lower() if e else f"command {cmd}"
