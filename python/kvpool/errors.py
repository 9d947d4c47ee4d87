# SPDX-License-Identifier: MIT
"""Exceptions of the kvpool binding.

Every libkvlease call returns 0, a count or -errno; the binding turns a
negative value into a :class:`KvpoolError` (an :class:`OSError`) whose
``errno`` is that value's errno and whose ``function`` names the C call.
A few errnos that callers handle on their own get a subclass (so that
``except QuotaExceeded`` reads as what it means); every one of them is
still a ``KvpoolError`` with its ``errno``.
"""
from __future__ import annotations

import errno as _errno
import os


class KvpoolError(OSError):
    """A libkvlease call failed: ``errno`` is its errno (``EDQUOT``,
    ``EAGAIN``, ``ETIMEDOUT``, ``EPERM``, ``ESTALE``...), ``function`` the
    C function that returned it (or ``None`` for checks made by the
    binding itself, such as a wrong array shape)."""

    function: str | None

    def __init__(self, err: int, message: str | None = None,
                 function: str | None = None):
        text = message if message is not None else os.strerror(err)
        if function and message is None:
            text = f"{function}: {text}"
        super().__init__(err, text)
        self.function = function

    @staticmethod
    def from_errno(err: int, function: str | None = None) -> "KvpoolError":
        """The exception for errno err (the subclass when there is one)."""
        cls = _BY_ERRNO.get(err, KvpoolError)
        return cls(err, None, function)


class QuotaExceeded(KvpoolError):
    """EDQUOT: the grant would exceed the tenant's blocks.max."""


class WouldBlock(KvpoolError):
    """EAGAIN: no block free now and the call was not to wait."""


class LeaseTimeout(KvpoolError):
    """ETIMEDOUT: blocks did not come free within the timeout."""


class StaleEpoch(KvpoolError):
    """ESTALE: kvpoold restarted and block contents were lost; every
    sequence of the context now has length 0 (see ``Context.epoch``)."""


class InvalidArgument(KvpoolError, ValueError):
    """EINVAL: a bad argument, from libkvlease or from the binding's own
    checks (an array of the wrong dtype, shape or memory order, a closed
    object).  Also a :class:`ValueError`."""


_BY_ERRNO = {
    _errno.EINVAL: InvalidArgument,
    _errno.EDQUOT: QuotaExceeded,
    _errno.EAGAIN: WouldBlock,
    _errno.ETIMEDOUT: LeaseTimeout,
    _errno.ESTALE: StaleEpoch,
}
