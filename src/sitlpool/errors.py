"""sitlpool's exception hierarchy.

Every error a user can hit is one of these, with a message that says what happened,
to what, and what to do. Interfaces print ``str(exc)`` as one line.
"""

from __future__ import annotations


class SitlpoolError(Exception):
    """Base of every error sitlpool raises on purpose."""


class ConfigError(SitlpoolError, ValueError):
    """A setting (environment variable, option or argument) is invalid."""


class InstanceError(SitlpoolError, ValueError):
    """An instance number that cannot be used at all (reserved, out of range)."""


class LockDirError(SitlpoolError):
    """The lock directory or a file in it cannot be used safely."""


class UnusableInstance(SitlpoolError):
    """One instance cannot be used for a reason of its own (a bad lock file, a session dir
    that is a symlink or a file): a pool scan skips it; asking for it by number raises this."""


class BadLockFile(LockDirError, UnusableInstance):
    """One instance's lock file cannot be used (a symlink, FIFO, directory, unreadable file):
    a pool scan skips that instance; asking for it by number raises this."""


class LeaseError(SitlpoolError):
    """Base of the errors about taking a lease."""


class OwnerError(LeaseError, ValueError):
    """An owner or label that is blank, too long or holds control characters."""


class InstanceBusy(LeaseError):
    """A requested instance is leased by someone else (``holder`` names who)."""

    def __init__(self, message: str, holder=None):
        super().__init__(message)
        self.holder = holder


class PortsBusy(LeaseError):
    """A requested instance is not leased but its ports are taken by a process."""


class NoFreeInstance(LeaseError):
    """Every instance of the pool is leased or has its ports taken."""


class LeaseReleased(LeaseError):
    """An operation needed a lease that was already released."""


class ProcessError(SitlpoolError):
    """A SITL process could not be launched, attached to, or did not become ready."""


class NotRunning(ProcessError):
    """A handle was asked for something that needs a running process."""


class UnknownEndpoint(SitlpoolError, KeyError):
    """``endpoint(name)`` with a name that is not serial0, serial1 or serial2."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ResolveError(ProcessError):
    """An unmanaged SITL could not be found or has no free port to attach on."""


class KillRefused(SitlpoolError):
    """kill_instance refused: someone holds the instance, or it needs ``force``."""


class MavlinkError(SitlpoolError):
    """A MAVLink command failed, was refused by the vehicle, or timed out."""


class ReadOnlyLink(MavlinkError):
    """A command that changes the vehicle was sent on a read-only link."""


class SessionError(SitlpoolError):
    """An unknown session, or a session in the wrong state for the request."""
