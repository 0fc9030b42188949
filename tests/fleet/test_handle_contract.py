"""One process-handle contract (``sitlpool.process.base.SitlHandle``, a ``typing.Protocol``)
that a SITL launched here (``ManagedSitl``), one attached to (``UnmanagedSitl``) and one on a
Ray node (``fleet.RemoteSitl``) all keep: every member present with a compatible signature,
and ``isinstance`` of live handles. Nothing is kept in step by hand."""

from __future__ import annotations

import inspect

import pytest

from sitlpool.config import load_settings
from sitlpool.process import ManagedManager, ManagedSitl, UnmanagedManager, UnmanagedSitl
from sitlpool.process.base import HandleBase, SitlHandle

pytest.importorskip("ray")

from sitlpool.fleet.remote import RemoteSitl  # noqa: E402

HANDLES = [ManagedSitl, UnmanagedSitl, RemoteSitl]


def protocol_members() -> dict[str, object]:
    """Name -> what the Protocol declares (a function, a property, or an annotation)."""
    out: dict[str, object] = {}
    for name, value in vars(SitlHandle).items():
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
            out[name] = value
    for name in SitlHandle.__annotations__:
        out.setdefault(name, "attribute")
    return out


def declared(cls: type, name: str) -> object:
    """What ``cls`` (or a base) declares for ``name``: a class attribute or an annotation."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
        if name in getattr(klass, "__annotations__", {}):
            return "attribute"
    return None


def test_the_protocol_names_what_a_handle_offers():
    members = protocol_members()
    assert {"name", "link", "instance", "ports", "pid", "ready", "dead", "alive", "running", "status"} <= set(members)
    assert {"endpoint", "kill", "join"} <= set(members)


@pytest.mark.parametrize("cls", HANDLES, ids=lambda c: c.__name__)
def test_every_handle_class_has_every_member_with_a_compatible_signature(cls):
    problems = []
    for name, want in protocol_members().items():
        have = declared(cls, name)
        if have is None:
            problems.append(f"{name}: missing")
            continue
        if inspect.isfunction(want):
            if not inspect.isfunction(have):
                problems.append(f"{name}: not a method ({have!r})")
                continue
            w, h = inspect.signature(want), inspect.signature(have)
            for p in w.parameters.values():
                q = h.parameters.get(p.name)
                if q is None:
                    problems.append(f"{name}: no parameter {p.name}")
                elif p.default is not inspect.Parameter.empty and q.default != p.default:
                    problems.append(f"{name}({p.name}=...): default {q.default!r}, the contract says {p.default!r}")
            extra = [
                q.name
                for q in h.parameters.values()
                if q.name not in w.parameters
                and q.default is inspect.Parameter.empty
                and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
            ]
            if extra:
                problems.append(f"{name}: requires {extra} beyond the contract")
        elif isinstance(want, property) and callable(have) and not isinstance(have, property):
            problems.append(f"{name}: a method where the contract has a property")
    assert not problems, f"{cls.__name__} breaks the handle contract: {problems}"


def test_remote_and_local_handles_share_base_code_not_copies():
    """endpoint/alive/running come from process.base for the remote handle too."""
    assert issubclass(RemoteSitl, HandleBase)
    for name in ("endpoint", "alive", "running"):
        assert name not in vars(RemoteSitl), f"RemoteSitl re-implements {name}"


def test_live_managed_and_unmanaged_handles_are_sitl_handles(env, instances):
    m = ManagedManager(load_settings())
    u = UnmanagedManager()
    try:
        h = m.start("contract", speedup=5)
        assert isinstance(h, SitlHandle)
        seen = u.start("contract-attach", instance=h.instance)
        assert isinstance(seen, SitlHandle)
        assert seen.endpoint("serial1") == h.endpoint("serial1")
    finally:
        u.close_all()
        m.close_all()
