"""A lock file removed or replaced while held (a group member's `rm` in a lock directory
without the sticky bit) lets a second acquirer take the same instance: the first holder
learns its lease was broken, `status` flags it, and `status` warns about such a directory."""

import json
import os
import stat
import subprocess
import sys

from conftest import hold_lease
from sitlpool.leases import LeasePool, lock_path


def leases_status(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool.leases", "status", *args], env=env, capture_output=True, text=True, timeout=60
    )


def cli_status(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", "status", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_holder_learns_its_lease_was_broken(env, lock_dir, instances):
    n = instances[0]
    first = LeasePool(lock_dir, [n], check=False).acquire("first holder")
    assert first.broken() is None
    os.unlink(lock_path(lock_dir, n))  # what `rm` by a group member does without the sticky bit
    second = LeasePool(lock_dir, [n], check=False).acquire("second holder")  # the doubled lease
    try:
        why = first.broken()
        assert why and f"instance {n} is broken" in why and "removed or replaced" in why and "chmod 3775" in why
        assert second.broken() is None
        assert "broken" in repr(first)
    finally:
        second.release()
        first.release()


def test_holder_learns_its_lock_file_was_replaced(env, lock_dir, instances):
    n = instances[0]
    first = LeasePool(lock_dir, [n], check=False).acquire("first holder")
    try:
        path = lock_path(lock_dir, n)
        other = path.with_name("planted")
        other.write_text("someone\t1\t1\n")
        os.replace(other, path)
        assert "another file is there now" in (first.broken() or "")
    finally:
        first.release()


def test_status_flags_a_broken_lease(env, procs, lock_dir, instances):
    n = instances[1]
    holder = hold_lease(procs, lock_dir, n, "first holder (alice)")
    os.unlink(lock_path(lock_dir, n))
    second = LeasePool(lock_dir, [n], check=False).acquire("second holder (bob)")
    try:
        r = leases_status(env, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert [(h["instance"], h["pid"]) for h in doc["held"]] == [(n, os.getpid())]
        assert [(h["instance"], h["pid"], h["record_owner"]) for h in doc["broken"]] == [
            (n, holder.pid, "first holder (alice)")
        ]
        r = leases_status(env)
        assert "BROKEN" in r.stdout and str(holder.pid) in r.stdout
        r = cli_status(env, "--json")
        assert r.returncode == 0, r.stderr
        assert [h["pid"] for h in json.loads(r.stdout)["broken"]] == [holder.pid]
        r = cli_status(env)
        assert r.returncode == 0 and "BROKEN LEASE" in r.stdout, r.stdout + r.stderr
    finally:
        second.release()


def test_status_warns_on_a_shared_lock_dir_without_sticky_bit(env, lock_dir, instances):
    LeasePool(lock_dir, instances[:1], check=False).acquire("x").release()
    os.chmod(lock_dir, 0o2775)  # the mode the README recommended
    r = leases_status(env, "--json")
    warnings = json.loads(r.stdout)["warnings"]
    assert len(warnings) == 1 and "sticky" in warnings[0] and f"chmod 3775 {lock_dir}" in warnings[0]
    text = leases_status(env).stdout
    assert sum("sticky" in line for line in text.splitlines()) == 1, text
    assert "sticky" in cli_status(env).stdout
    os.chmod(lock_dir, 0o3775)
    assert json.loads(leases_status(env, "--json").stdout)["warnings"] == []
    os.chmod(lock_dir, 0o755)  # one user's own directory: nothing to warn about
    assert json.loads(leases_status(env, "--json").stdout)["warnings"] == []


def test_lock_dir_made_in_a_shared_data_dir_gets_the_sticky_bit(env, data_dir, lock_dir, instances):
    os.chmod(data_dir, 0o2775)
    LeasePool(lock_dir, instances[:1], check=False).acquire("x").release()
    mode = os.stat(lock_dir).st_mode
    assert mode & stat.S_ISVTX and mode & stat.S_IWGRP, oct(mode)
