"""The session contract (issue 19): ``sessions.SessionLike`` is what the MCP tools and the
registry use of a session; a local ``Session`` and the fleet's ``RemoteSession`` both
satisfy it, member by member, with compatible signatures, so nothing is kept in step by
hand. The MCP tools call a session's own actions, not a string dispatcher."""

import inspect
from types import SimpleNamespace

import pytest

from sitlpool import sessions
from sitlpool.sessions import Session, SessionLike, Sessions

MEMBERS = [name for name in dir(SessionLike) if not name.startswith("_")]
DATA = sorted(SessionLike.__annotations__)


def remote_session():
    from sitlpool.fleet.serve import RemoteSession

    return RemoteSession(SimpleNamespace(session_id="abc123", label="remote", info={}, link=None, state="running"))


def local_session():
    return Session("abc123", "local", handle=SimpleNamespace(link=None, dead=False, ready=True), kind="managed")


def problems(cls, instance) -> list[str]:
    """What ``cls`` lacks of the contract, or has with another signature."""
    out = []
    for name in DATA:
        if not hasattr(instance, name):
            out.append(f"{cls.__name__}.{name}: missing (an attribute of the contract)")
    for name in MEMBERS:
        want = inspect.getattr_static(SessionLike, name)
        have = inspect.getattr_static(cls, name, None)
        if have is None:
            out.append(f"{cls.__name__}.{name}: missing")
        elif isinstance(want, property):
            if not isinstance(have, property):
                out.append(f"{cls.__name__}.{name}: not a property")
        elif not callable(have):
            out.append(f"{cls.__name__}.{name}: not a method")
        else:
            ws, hs = inspect.signature(want), inspect.signature(have)
            for p in ws.parameters.values():
                q = hs.parameters.get(p.name)
                if q is None or q.kind != p.kind or q.default != p.default:
                    out.append(f"{cls.__name__}.{name}{hs}: the contract says {name}{ws}")
                    break
            else:
                extra = [q for q in hs.parameters.values() if q.name not in ws.parameters and q.default is q.empty]
                if extra:
                    out.append(f"{cls.__name__}.{name}{hs}: needs arguments the contract does not give")
    return out


def test_a_local_session_satisfies_the_contract():
    s = local_session()
    assert problems(Session, s) == []
    assert isinstance(s, SessionLike)


def test_a_remote_session_satisfies_the_contract():
    pytest.importorskip("ray")
    from sitlpool.fleet.serve import RemoteSession

    s = remote_session()
    assert problems(RemoteSession, s) == []
    assert isinstance(s, SessionLike)


def test_the_flight_actions_are_the_contracts_methods():
    assert set(sessions.FLIGHT_ACTIONS) <= set(MEMBERS)


def test_the_registry_is_no_flight_dispatcher():
    """wait conditions live in sitlpool.conditions, flying on the session: the registry opens,
    attaches, closes, finds and reaps."""
    for gone in ("fly", "wait_until", "snapshot", "list_instances", "_predicate"):
        assert not hasattr(Sessions, gone), gone
