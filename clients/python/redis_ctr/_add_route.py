"""Where an add of a spread counter goes next, the part without I/O (:class:`AddRoute`).

The sync and asyncio clients send an add to :attr:`AddRoute.target`, feed what came back to
the route (:meth:`AddRoute.replied` for a reply, :meth:`AddRoute.failed` for an error in
:data:`ROUTED`) and do what the :data:`Step` it returns says: return the reply
(:class:`Done`), send the add again to the (new) target (:class:`Send`), sleep and then send
it again to the same target (:class:`Pause`), or read the holders and give them to
:meth:`AddRoute.reread` (:class:`Reread`), which says the next step. An error that is final is
raised by the route itself, in the client's ``except`` clause, as the clients raised it before.
The rules are those of :mod:`redis_ctr._spread`; the Rust library's ``SpreadRouter::after_add``
decides the same way.
"""

from __future__ import annotations

import re
from typing import List, Optional, Union

from redis.exceptions import ClusterError, ConnectionError, MovedError, TimeoutError

from ._budget import BudgetWait
from ._calls import KeyT
from ._spread import ELSEWHERE_MS, UNREACHABLE_MS, AddWalk, HolderCache, Holders
from .errors import AddAwaitsFold, BudgetInFlight, HolderFolded, HolderMoving


def not_run(error: BaseException) -> bool:
    """True when ``error`` means that the command never ran: ``MOVED`` (a non-cluster client's
    server does not serve the key), or a connection that could not be made (the master is
    down). Then an add can go to another holder without counting twice."""
    if isinstance(error, MovedError):
        return True
    return isinstance(error, (ConnectionError, TimeoutError)) and "connecting to" in str(error)


def timed_out(error: BaseException) -> bool:
    """True when ``error`` is a reply that did not come in time (``socket_timeout``) for a
    command that was sent: a frozen or overloaded server, which may still run it."""
    return isinstance(error, TimeoutError) and not not_run(error)


def left_out(cache: HolderCache, holder: KeyT, error: BaseException) -> None:
    """Leaves ``holder`` out for a while after ``error``, which did not run a write there (see
    :func:`not_run`): ``MOVED`` (this client's server does not serve it), or its master out
    of reach (every holder that master serves with it)."""
    moved = isinstance(error, MovedError)
    cache.unreachable(holder, away_for_ms(error), failed_node(error), moved=moved)


def sent_on(
    cache: HolderCache, holder: KeyT, error: BaseException, token: Optional[KeyT], retry: bool
) -> bool:
    """After ``error`` did not run an add at ``holder`` (not the key given): leaves ``holder``
    out and says whether the add goes on to another holder. An untokened add does; a tokened
    one only at its first send and only after ``MOVED`` (this client can never write that
    holder). A tokened add whose holder's master is out of reach is raised: its retry, from
    here or another process, must pick the same holder."""
    left_out(cache, holder, error)
    return token is None or (not retry and isinstance(error, MovedError))


def away_for_ms(error: BaseException) -> int:
    """How long a holder that failed with ``error`` (see :func:`not_run`) is left out."""
    return ELSEWHERE_MS if isinstance(error, MovedError) else UNREACHABLE_MS


_CONNECTING_TO = re.compile(r"connecting to (\S+):(\d+)\.")


def failed_node(error: BaseException) -> Optional[str]:
    """The server (``host:port``) that a connection error could not connect to, from redis-py's
    text ("Error 111 connecting to host:port. ..."); None for any other error."""
    if isinstance(error, MovedError) or not isinstance(error, (ConnectionError, TimeoutError)):
        return None
    found = _CONNECTING_TO.search(str(error))
    return None if found is None else f"{found.group(1)}:{found.group(2)}"


def add_wait(limit: float, member: KeyT, token: Optional[KeyT]) -> BudgetWait:
    """The wait of an add at one member that answers that its share of the room is in flight
    (``TRYAGAIN budget in flight``) or, to a new token, that its fold is on its way
    (``TRYAGAIN add awaits a fold``): asked again for up to ``limit`` seconds, as a purchase
    asks a holder (:mod:`redis_ctr._budget`). When a cluster client gave up after its own
    retries, a tokened add raises :class:`AddAwaitsFold`, an untokened one
    :class:`BudgetInFlight` (only tokened adds wait for folds)."""
    if token is None:
        return BudgetWait(limit, member, BudgetInFlight, retried="the add")
    return BudgetWait(limit, member, AddAwaitsFold)


_ASKED_AGAIN = (BudgetInFlight, HolderMoving, ClusterError)
_NOT_RUN_OR_LOST = (MovedError, ConnectionError, TimeoutError)
ROUTED = (*_ASKED_AGAIN, HolderFolded, *_NOT_RUN_OR_LOST)
"""The errors of an add's send that the clients give to :meth:`AddRoute.failed`; any other is
raised as it is."""


class Done:
    """The add's reply: the value of the member that applied it, None when refused."""

    __slots__ = ("value",)

    def __init__(self, value: Optional[int]) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Done({self.value!r})"


class Send:
    """Send the add to :attr:`AddRoute.target` (a new one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Send()"


class Pause:
    """Sleep ``seconds``, then ask the same target again."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"Pause({self.seconds!r})"


class Reread:
    """Read the holders of :attr:`AddRoute.key` (the cache's, read again when the route forgot
    them) and give them to :meth:`AddRoute.reread`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Reread()"


Step = Union[Done, Send, Pause, Reread]
"""What an add does next (see :class:`AddRoute`)."""

SEND = Send()
REREAD = Reread()


class AddRoute:
    """An add of ``key`` on its way over a spread counter's members (see :mod:`redis_ctr._spread`):
    its first target is a random holder of ``holders`` in reach, or the token's holder
    (:meth:`HolderCache.target`, which raises :class:`~redis_ctr.errors.HolderAway` when that
    one is left out for now); then on to another holder after a folded one or one that never
    ran it, and, once a member refused it (nil), over the others by the walk
    (:class:`AddWalk`). ``holders=None``: an untokened add of a key whose holders were never
    read (:meth:`HolderCache.cold`), sent to the key given as it is (any error raised); a nil
    then reads the holders and walks on when the key is a bounded spread's home. A member
    whose room is in flight is asked again for up to ``wait`` seconds (:func:`add_wait`)."""

    def __init__(
        self,
        cache: HolderCache,
        key: KeyT,
        token: Optional[KeyT],
        holders: Optional[Holders],
        wait: float,
    ) -> None:
        self.key = key
        self.token = token
        self._cache = cache
        self._limit = wait
        self._cold = holders is None
        self._holders: Holders = (key,) if holders is None else holders
        # This client sent the token before (a retry: it stays with its holder).
        self._retry = cache.remembers(key, token)
        self.target: KeyT = key if holders is None else cache.target(key, holders, token)
        """The member the add goes to next."""
        # Members it did not count at: folded back, or did not run it (before any nil).
        self._folded: List[KeyT] = []
        self._wait: Optional[BudgetWait] = None
        # The members still to visit once one refused it (None before a nil).
        self._walk: Optional[AddWalk] = None

    def replied(self, value: Optional[int]) -> Step:
        """The next step after ``value``, the target's reply. Raises what the walk raises
        (:meth:`AddWalk.next`)."""
        if value is not None:
            return Done(value)
        if self._cold:
            # Refused by the key's own bound: walked on when it is a bounded spread's home.
            return REREAD
        # Refused by this member's share of the bound: on to the others (costs nothing until a
        # nil came back).
        if self._walk is None:
            if len(self._holders) < 2:
                return Done(None)
            visited = (*self._folded, self.target)
            self._walk = AddWalk(self._cache, self._holders, self.token, visited, self._retry)
        return self._walk_on()

    def failed(self, error: Exception) -> Step:
        """The next step after ``error``, the target's (one of :data:`ROUTED`); raises it (or
        the error of a wait that is over) when it is final. Call it in the ``except`` clause
        that caught ``error``."""
        if self._cold:
            raise error
        if isinstance(error, _ASKED_AGAIN):
            # A member whose room is in flight (TRYAGAIN budget in flight), or a holder
            # being folded back that passes a new token on only once its fold landed (else
            # a failover could give it back unsealed, to count a retry again): the same
            # member is asked again, same token, as a purchase asks a holder (_budget).
            # Anything else (a slot moving) is raised.
            if self._wait is None:
                self._wait = add_wait(self._limit, self.target, self.token)
            return Pause(self._wait.pause_after(error))
        if isinstance(error, HolderFolded):
            # Not counted there (see _spread): on to a current holder, or the home key; on
            # the walk, to the next member. The key given refusing is raised (not a home).
            if self.target == self.key:
                raise error
            if self._walk is None:
                self._folded.append(self.target)
                self._cache.forget(self.key)  # the holders are read again (see reread)
                return REREAD
            if self.token is None:
                self._cache.forget(self.key)  # a stale list: read again next time
            return self._walk_on()
        if not isinstance(error, _NOT_RUN_OR_LOST):
            raise error
        if timed_out(error):
            # Its master took too long (frozen?): it may still count this add, so it
            # is not sent elsewhere (raised: maybe counted, as a lost reply); the next
            # adds leave that master out for a while.
            self._cache.timed_out(self.target)
            raise error
        # Never ran there (MOVED, no connection): on to another holder in reach.
        if (self.target == self.key and self._walk is None) or not not_run(error):
            raise error
        if not sent_on(self._cache, self.target, error, self.token, self._retry):
            raise error
        if self._walk is None:
            self._folded.append(self.target)
            return self._go(self._retarget())
        self._walk.unreached(error)
        return self._walk_on()

    def reread(self, holders: Holders) -> Step:
        """The next step once the holders asked for by :class:`Reread` are read: after a
        folded holder, a current one (:meth:`HolderCache.retarget`); after a cold key's nil,
        the walk over them (None when the key is not spread)."""
        self._holders = holders
        if not self._cold:
            return self._go(self._retarget())
        self._cold = False
        if len(holders) < 2:
            return Done(None)
        self._walk = AddWalk(self._cache, holders, None, (self.key,), retry=False)
        return self._walk_on()

    def _retarget(self) -> KeyT:
        return self._cache.retarget(self.key, self._holders, self.token, self._folded)

    def _walk_on(self) -> Step:
        """The next member of the walk, or the refusal when none is left."""
        assert self._walk is not None
        following = self._walk.next()
        if following is None:
            return Done(None)
        return self._go(following)

    def _go(self, target: KeyT) -> Step:
        self.target = target
        self._wait = None
        return SEND
