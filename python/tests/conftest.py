# SPDX-License-Identifier: MIT
"""pytest fixtures: a private kvpoold (CPU backend, in-process ledger) on
a socket in a temporary directory, shared by the tests of a session."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))                  # python/
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import kvpool.testing  # noqa: E402

# Tenants of the shared daemon: NAME:MAX (blocks of 64 KiB).
TENANTS = ["small:8", "victim", "chat", "other", "engine0", "engine1",
           "engine2"]


@pytest.fixture(scope="session")
def daemon():
    d = kvpool.testing.Daemon(tenants=TENANTS)
    yield d
    d.stop()


@pytest.fixture
def sock(daemon):
    assert daemon.alive(), daemon.log()
    return daemon.socket


@pytest.fixture
def fresh_daemon():
    """A daemon of one test's own (for restarts)."""
    d = kvpool.testing.Daemon(tenants=["chat"])
    yield d
    d.stop()
