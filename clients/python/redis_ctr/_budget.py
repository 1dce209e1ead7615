"""The pauses of a purchase that asks one holder again while its budget is in flight (and of a
refund that asks a holder again while its fold takes the grant's units home:
:class:`~redis_ctr.errors.RefundAwaitsFold`, a kind of budget in flight, whose class the
refund's wait is given; and of an add that asks a member of a bounded spread counter again
while its share of the room is in flight, or a holder while its fold is on its way:
:class:`~redis_ctr.errors.AddAwaitsFold`).

A ``CTR.DECRFLOOR`` that only budget still travelling keeps from being granted (a holder of a
floored spread before its share landed, a holder whose budget move is unacknowledged) answers
``TRYAGAIN budget in flight`` (:class:`~redis_ctr.errors.BudgetInFlight`) and records nothing
against its token. The sync and asyncio clients then ask the same holder again with the same
token after 5 ms, 10 ms, ... doubling up to 100 ms apart, until ``purchase_wait`` seconds have
passed since its first answer, and then raise the error. They never skip the holder: a retry of
the purchase would be decided afresh there, and a grant there plus one further on is a double
sale.

On a ``RedisCluster`` (sync or asyncio) redis-py retries a ``TRYAGAIN`` reply by itself first:
16 sends of the command to the same node, pausing 50 ms after each from the 9th on (about
0.4 s), then it raises
``ClusterError("TTL exhausted.")`` without the reply's text. On a single-key command that means
every send was turned away undecided (``TRYAGAIN``, or redirections), so it is treated here like
the budget in flight it almost always is: the holder is asked again, and when the wait is over
the error raised is a :class:`~redis_ctr.errors.BudgetInFlight` whose cause is that
``ClusterError``.
"""

from __future__ import annotations

import time
from typing import Optional, Type

from ._calls import KeyT
from .errors import BudgetInFlight, HolderMoving, cluster_gave_up

DEFAULT_PURCHASE_WAIT = 2.0
"""Seconds a purchase asks a holder again while it answers that budget is in flight."""


def _cluster_gave_up(error: BaseException) -> bool:
    """redis-py's cluster client's error after its own retries of ``TRYAGAIN`` (or redirects),
    as it is or as the :class:`HolderMoving` the library made of it."""
    if isinstance(error, HolderMoving):
        return error.__cause__ is not None and cluster_gave_up(error.__cause__)
    return cluster_gave_up(error)


def _text(key: KeyT) -> str:
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else key


class BudgetWait:
    """The pauses of a purchase asking one holder: 5 ms, doubling up to 100 ms, until ``limit``
    seconds have passed since the holder's first answer (0: no pause, the error at once)."""

    FIRST = 0.005
    MOST = 0.1

    def __init__(
        self,
        limit: float,
        holder: KeyT,
        kind: Type[BudgetInFlight] = BudgetInFlight,
        retried: Optional[str] = None,
    ) -> None:
        self.limit = limit
        self.holder = holder
        self.kind = kind
        self.retried = kind.retried if retried is None else retried
        """What the text of the error raised after a cluster client gave up says to retry."""
        self._deadline: Optional[float] = None
        self._next = BudgetWait.FIRST

    def pause_after(self, error: Exception) -> float:
        """The pause (seconds) before asking the holder again after ``error``; raises the
        error instead when it is final (anything but budget in flight, or the wait is over)."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.limit
        gave_up = _cluster_gave_up(error)
        if not (gave_up or isinstance(error, BudgetInFlight)):
            raise error
        left = self._deadline - now
        if left <= 0:
            if gave_up:
                # The text as redis-py leaves a TRYAGAIN reply's: without the code.
                cause = error.__cause__ if isinstance(error, HolderMoving) else error
                raise self.kind(
                    f"budget in flight: the cluster client gave up on spread counter holder "
                    f"'{_text(self.holder)}' after its own TRYAGAIN retries ({cause}); retry "
                    f"{self.retried}"
                ) from cause
            raise error
        pause = min(self._next, left)
        self._next = min(self._next * 2, BudgetWait.MOST)
        return pause
