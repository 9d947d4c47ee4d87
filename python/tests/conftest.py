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


# Tenants of the tiers daemon: "tight" has room for 6 top-pool blocks
# (the pressure tests), the others none of their own limits.
TIER_TENANTS = ["tight:6", "swapper", "prefix", "prefix2", "edit"]


@pytest.fixture(scope="session")
def tier_daemon(tmp_path_factory):
    """kvpoold with a dram tier of 512 blocks and an nvme tier (a file)
    of 32 MiB below the top pool."""
    swapfile = tmp_path_factory.mktemp("swap") / "tier.swap"
    d = kvpool.testing.Daemon(tenants=TIER_TENANTS, extra=[
        "--tier", "dram:512", "--tier", f"nvme:{swapfile}:32M"])
    yield d
    d.stop()


@pytest.fixture
def tsock(tier_daemon):
    assert tier_daemon.alive(), tier_daemon.log()
    return tier_daemon.socket
