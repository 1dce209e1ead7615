"""A coalescing writer: many adds summed locally, flushed as one tokened ``CTR.ADD`` per key.

A thousand ``add("views", 1)`` become one ``CTR.ADD views 1000 TOKEN <writer id>:<sequence>``.
Each flushed sum carries its own token, and a sum whose reply was lost (a timeout, a dropped
connection) is sent again with the same token, so it counts exactly once.

What a crash of the process can lose: the adds made since the last flush (at most
``flush_interval_ms`` of them, or ``flush_every`` adds), and a flushed sum whose reply had not
arrived (it either counted once or not at all). Nothing is ever counted twice, as long as a
retry reaches the server within ``ctr.token-window-ms`` (default one hour) of the first send:
the first send carries its event time (``AT``), so a later retry is refused
(:class:`~redis_ctr.errors.TokenTooOld`) instead of counting a second time.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Deque, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

from redis.exceptions import ClusterError, ConnectionError, MovedError, TimeoutError, TryAgainError

from . import _calls
from ._calls import KeyT
from ._spread import HolderCache, Holders, holder_for_token, probe_order
from ._async_client import AsyncClient, AsyncCtr, async_client
from ._async_client import run as run_async
from ._add_route import left_out, not_run, timed_out
from .client import DEFAULT_REFRESH_MS, Ctr, SyncClient, run
from .client import sync_client
from .errors import CtrError, HolderFolded

log = logging.getLogger(__name__)

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# Errors after which a sum may or may not have counted, or that a moment later go away (a lost
# connection, a timeout, a holder or slot being moved, a failover): the same sum is sent again
# to the same key with the same token, which makes that safe.
HELD_BACK = "a sum is held back: its holder's master timed out lately (it may still count it)"
_RETRYABLE = (ConnectionError, TimeoutError, TryAgainError, ClusterError, MovedError)


DEFAULT_CLOSE_TIMEOUT = 10.0
"""Seconds ``close`` keeps sending the sums not yet acknowledged (each again with its token)
before it reports those it could not deliver."""
_CLOSE_PAUSE_MAX = 1.0


class Undelivered(ConnectionError, TimeoutError):
    """``close`` ran out of ``close_timeout`` with sums not acknowledged: each either counted
    once or not at all (a resend with its token, within ``ctr.token-window-ms``, counts it at
    most once). :attr:`sums` lists them; the cause is the last send's error. Both a redis-py
    ``ConnectionError`` and ``TimeoutError``, the errors ``close`` raised before it retried."""

    def __init__(self, message: str, sums: List[Tuple[KeyT, int, str]]) -> None:
        super().__init__(message)
        self.sums = sums
        """``(key, delta, token)`` of every sum not delivered."""


class WriterFull(Exception):
    """``add`` of a new key while ``max_keys`` keys are pending and a flush to make room failed
    (the server cannot be reached). The add was not recorded."""


@dataclass
class WriterStats:
    """What a writer did since it was made."""

    adds: int = 0
    """``add`` calls recorded."""
    commands: int = 0
    """``CTR.ADD`` commands sent, retries included."""
    flushed_sums: int = 0
    """Sums acknowledged by the server."""
    retries: int = 0
    """Sends repeated (same token) after a connection error or timeout."""
    refused: int = 0
    """Sums refused by a bound (a negative sum on a floored counter, a positive one on a ceiled
    counter; nil reply), on a spread counter by every holder: not applied."""
    dropped: int = 0
    """Sums the server refused with an error (wrong type, overflow, token too old): not applied."""
    rerouted: int = 0
    """Sums sent to another holder (or the home key) because a shrink had folded their holder
    back into its home before they reached it: not applied there, so sent on."""
    walked: int = 0
    """Sends of a sum on to another holder of a bounded spread counter after a holder refused
    it (its share of the floor's budget or of the ceiling's room used up; nil reply)."""


@dataclass(frozen=True)
class _Sum:
    key: KeyT
    delta: int
    token: str
    at: int
    target: Optional[KeyT] = None
    """The holder the sum is sent to, chosen at its first send and kept for its retries."""
    folded: Tuple[KeyT, ...] = ()
    """Holders that refused it as folded back, or where it never ran (so it did not count)."""
    maybe_counted: bool = False
    """True once a send of it may have run (a reply lost): from then on it goes nowhere else."""
    refused: Tuple[KeyT, ...] = ()
    """Holders of a bounded spread counter that refused it (nil; each records the refusal
    under its token and replays it)."""

    def routed(self, holders: Holders) -> _Sum:
        """The sum with its target: the token's holder (the home key when not spread)."""
        return replace(self, target=holder_for_token(holders, self.token))

    def rerouted(self, holders: Holders) -> Optional[_Sum]:
        """The sum sent on after its target refused it as a holder folded back into its home.

        A folded holder answers a retry of a write it counted with that write's first reply,
        so the refusal means that this sum never counted there: it goes to the token's holder
        among ``holders`` (re-read after the refusal), or to the home key when that one refused
        it too (a home is never folded). None when the home key itself refused it (the key
        given is not a home: a name of a holder that was folded): then it is final."""
        target = self.key if self.target is None else self.target
        if target == self.key:
            return None
        folded = (*self.folded, target)
        chosen = holder_for_token(holders, self.token)
        if chosen in folded:
            chosen = self.key
        return replace(self, target=chosen, folded=folded)

    def elsewhere(self, holders: Holders) -> Optional[_Sum]:
        """The sum sent on after its target did not run it (``MOVED``, a failed connect) and no
        earlier send of it may have: to the token's holder among ``holders`` (those in reach),
        or the home key. None when it may have counted, or the home key itself failed."""
        target = self.key if self.target is None else self.target
        if self.maybe_counted or target == self.key:
            return None
        folded = (*self.folded, target)
        current = [h for h in holders if h not in folded and h not in self.refused]
        chosen = holder_for_token(current, self.token) if current else self.key
        return replace(self, target=chosen, folded=folded)

    def walked_on(self, holders: Holders, reachable: Holders) -> Optional[_Sum]:
        """The sum sent on after its target refused it (nil: its share of a bound used up):
        to the next of ``holders`` by the probe rule for its token (:func:`probe_order`) that
        neither refused it nor did not run it, those in ``reachable`` first. None when there
        is none (the refusal is then final). The refusal is recorded under the token at the
        holder that made it, so the sum did not count there, whatever sends came before."""
        target = self.key if self.target is None else self.target
        refused = (*self.refused, target)
        passed = (*refused, *self.folded)
        order = [holders[i] for i in probe_order(self.token, len(holders))]
        left = [h for h in order if h not in passed]
        if not left:
            return None
        chosen = next((h for h in left if h in reachable), left[0])
        return replace(self, target=chosen, refused=refused, maybe_counted=False)

    def call(self) -> _calls.Call[Optional[int]]:
        target = self.key if self.target is None else self.target
        return _calls.add(target, self.delta, token=self.token, at=self.at)


class _Sums:
    """The bookkeeping both writers share: sums pending per key (at most ``max_keys``), sums
    sent and not yet settled (each with its token, kept until the server decides), stats."""

    def __init__(self, max_keys: int, flush_every: int, writer_id: str) -> None:
        self.max_keys = max_keys
        self.flush_every = flush_every
        self.writer_id = writer_id
        self.pending: Dict[KeyT, int] = {}
        self.since_flush = 0
        self.unsettled: Deque[_Sum] = deque()
        self.sequence = 0
        self.stats = WriterStats()
        self.last_error: Optional[BaseException] = None

    def record(self, key: KeyT, delta: int) -> bool:
        """False when the add needs a flush first (a new key at the cap, or a sum that would
        leave the 64-bit range)."""
        current = self.pending.get(key)
        if current is None and len(self.pending) >= self.max_keys:
            return False
        total = (current or 0) + delta
        if not I64_MIN <= total <= I64_MAX:
            return False
        self.pending[key] = total
        self.stats.adds += 1
        self.since_flush += 1
        return True

    def flush_due(self) -> bool:
        """True once per ``flush_every`` adds."""
        if self.since_flush < self.flush_every:
            return False
        self.since_flush = 0
        return True

    def seal(self) -> None:
        """Turns the pending sums into tokened sums to send (after the unsettled ones)."""
        pending, self.pending = self.pending, {}
        self.since_flush = 0
        now = int(time.time() * 1000)
        for key, delta in pending.items():
            if delta != 0:
                self.sequence += 1
                token = f"{self.writer_id}:{self.sequence}"
                self.unsettled.append(_Sum(key, delta, token, now))

    def settled(self, reply: Optional[int]) -> None:
        """The server applied the first unsettled sum, or refused it by a bound (None)."""
        if reply is None:
            self.stats.refused += 1
        else:
            self.stats.flushed_sums += 1
        self.unsettled.popleft()

    def walked_on(self, holders: Holders, reachable: Holders) -> bool:
        """The first unsettled sum was refused (nil) by its holder: True when it is to be sent
        on to another holder (see :meth:`_Sum.walked_on`), False when that refusal is final."""
        on = self.unsettled[0].walked_on(holders, reachable)
        if on is None:
            return False
        self.unsettled[0] = on
        self.stats.walked += 1
        return True

    def rerouted(self, error: HolderFolded, holders: Holders) -> bool:
        """The first unsettled sum met a holder folded back: True when it is to be sent on
        (see :meth:`_Sum.rerouted`), False when it was dropped (that was its home key)."""
        moved = self.unsettled[0].rerouted(holders)
        if moved is None:
            self.rejected(error)
            return False
        self.unsettled[0] = moved
        self.stats.rerouted += 1
        return True

    def rejected(self, error: CtrError) -> None:
        """The server refused the first unsettled sum with an error: it is not applied."""
        s = self.unsettled.popleft()
        self.stats.dropped += 1
        self.last_error = error
        log.warning("redis-ctr writer: sum %d for %r dropped: %s", s.delta, s.key, error)

    def full(self, error: Exception) -> WriterFull:
        return WriterFull(f"{self.max_keys} keys pending and the flush failed: {error}")


def _checked(delta: int) -> int:
    """``delta`` as an int: ``TypeError`` for a non-integer (a float would poison the key's sum,
    and the whole sum would be refused at its flush), ``ValueError`` outside 64 bits."""
    delta = _calls.integer("delta", delta)
    if not I64_MIN <= delta <= I64_MAX:
        raise ValueError("delta must be a signed 64-bit integer")
    return delta


ClientT = TypeVar("ClientT")


class _Writer(Generic[ClientT]):
    """Settings, sums and stats of both writers."""

    def __init__(
        self,
        client: ClientT,
        *,
        flush_interval_ms: int = 100,
        flush_every: int = 10_000,
        max_keys: int = 100_000,
        writer_id: Optional[str] = None,
        retries: int = 5,
        retry_backoff_ms: int = 20,
        spread_refresh_ms: Optional[int] = DEFAULT_REFRESH_MS,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        if flush_interval_ms <= 0 or flush_every <= 0 or max_keys <= 0 or retries < 0:
            raise ValueError("flush_interval_ms, flush_every and max_keys must be positive")
        if close_timeout < 0:
            raise ValueError("close_timeout must not be negative")
        self.close_timeout = close_timeout
        self.client = client
        self.flush_interval_ms = flush_interval_ms
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.spread_refresh_ms = spread_refresh_ms
        self._sums = _Sums(max_keys, flush_every, writer_id or uuid.uuid4().hex[:16])
        self._closed = False
        self._setup()

    def _setup(self) -> None:
        """What a writer needs besides the shared state (locks, its flush thread)."""

    @property
    def writer_id(self) -> str:
        """The prefix of this writer's tokens."""
        return self._sums.writer_id

    @property
    def stats(self) -> WriterStats:
        """What the writer did so far."""
        return self._sums.stats

    @property
    def last_error(self) -> Optional[BaseException]:
        """The last error of a background flush or a dropped sum, None after a good flush."""
        return self._sums.last_error

    def _undelivered(self, error: BaseException) -> Undelivered:
        """The report of a ``close`` that ran out of time: what was not delivered, and why."""
        sums = [(s.key, s.delta, s.token) for s in self._sums.unsettled]
        sums += [(key, delta, "") for key, delta in self._sums.pending.items() if delta]
        units = sum(abs(delta) for _, delta, _ in sums)
        return Undelivered(
            f"redis-ctr writer {self.writer_id}: {len(sums)} sums ({units} units) not delivered "
            f"within close_timeout={self.close_timeout}s (each counted once or not at all; "
            f"see .sums): {error}",
            sums,
        )

    @staticmethod
    def _close_pauses() -> Iterator[float]:
        """The pauses between the final flushes: 50 ms, doubling up to 1 s."""
        pause = 0.05
        while True:
            yield pause
            pause = min(pause * 2, _CLOSE_PAUSE_MAX)

    def _backoff_seconds(self, attempt: int) -> float:
        return self.retry_backoff_ms * (attempt + 1) / 1000

    def _cache(self) -> Optional[HolderCache]:
        ctr: Any = getattr(self, "_ctr", None)
        cache: Optional[HolderCache] = None if ctr is None else ctr._holders
        return cache

    def _reachable(self, holders: Holders) -> Holders:
        """``holders`` without those out of reach: a new sum's holder is picked among them (its
        token goes with it to that holder, so any holder is right)."""
        cache = self._cache()
        return holders if cache is None else cache.reachable(holders)

    def _held_back(self, s: _Sum) -> bool:
        """True for a sum that may have counted at a holder left out for now (its master timed
        out): it is not sent (it waits for that holder, whose master may still apply the first
        send) instead of costing every flush another timeout. Never once the writer is closing:
        then every sum is sent again until ``close_timeout`` has passed."""
        if not s.maybe_counted or self._closed:
            return False
        cache = self._cache()
        target = s.key if s.target is None else s.target
        return cache is not None and cache.away(target)

    def _sent_elsewhere(self, s: _Sum, error: Exception, holders: Holders) -> bool:
        """After a retryable ``error`` on the first unsettled sum ``s``: True when it never ran
        (``MOVED``, a failed connect) and no earlier send may have, so it is now addressed to
        another holder in reach (its holder left out for a while); else it is marked as
        maybe counted (it stays with its holder) and False."""
        sums = self._sums
        target = s.key if s.target is None else s.target
        moved = s.elsewhere(self._reachable(holders)) if not_run(error) else None
        cache = self._cache()
        if moved is None:
            sums.unsettled[0] = replace(s, maybe_counted=True)
            if cache is not None and timed_out(error):
                cache.timed_out(target)
            return False
        if cache is not None:
            left_out(cache, target, error)
        sums.unsettled[0] = moved
        sums.stats.rerouted += 1
        return True


class CoalescingWriter(_Writer[SyncClient]):
    """Sums adds per key and flushes them every ``flush_interval_ms`` (default 100) or every
    ``flush_every`` adds (default 10,000), whichever comes first, from a background thread
    (requests to flush that come while a flush runs fold into it).

    Bounded memory: at most ``max_keys`` keys (default 100,000) are summed at a time, plus at
    most as many sums sent and not yet acknowledged. An ``add`` of a new key when ``max_keys``
    are pending flushes first, in the caller's thread; when that flush fails, ``add`` raises
    :class:`WriterFull` and records nothing. Sums of one key that would leave the 64-bit range
    are flushed first too. A sum is sent up to ``1 + retries`` times (same token), pausing
    ``retry_backoff_ms`` times the attempt number in between.

    ``writer_id`` (a random one by default) prefixes every token: two writers alive at the
    same time must never share one. :meth:`close` (also called at interpreter exit, and by
    ``with``) flushes what is left. Works with ``redis.Redis`` and ``RedisCluster``.

    Spread counters: each sum goes to the holder its token picks (the documented token rule,
    holders learned as :class:`~redis_ctr.Ctr` does, refreshed every ``spread_refresh_ms``),
    chosen at its first send and kept for its retries, so a retried sum reaches the holder
    that may already have counted it. A sum that a holder of a bounded spread counter refuses
    (nil: its share of the floor's budget or of the ceiling's room used up) goes on, same
    token, to the next holder by the probe rule for its token, and is counted as refused only
    when every holder refused it (``stats.walked`` counts the sends on). A holder that answers
    ``TRYAGAIN`` (room in flight, a fold on its way) is asked again like a lost connection,
    never passed. ``spread_refresh_ms=None`` sends every sum to its key.
    """

    def _setup(self) -> None:
        sync_client(self.client, "CoalescingWriter")
        self._ctr = Ctr(self.client, spread_refresh_ms=self.spread_refresh_ms)
        self._lock = threading.Lock()  # guards the pending sums
        self._flush_lock = threading.Lock()  # one flush at a time; guards the unsettled sums
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-ctr-writer", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    def add(self, key: KeyT, delta: int = 1) -> None:
        """Adds ``delta`` to ``key``; sent with the next flush."""
        delta = _checked(delta)
        if self._record(key, delta):
            return
        try:
            self.flush()
        except (ConnectionError, TimeoutError) as e:
            raise self._sums.full(e) from e
        if not self._record(key, delta):
            raise WriterFull(f"{self._sums.max_keys} keys pending")

    def _record(self, key: KeyT, delta: int) -> bool:
        with self._lock:
            if self._closed:
                raise RuntimeError("add on a closed CoalescingWriter")
            if not self._sums.record(key, delta):
                return False
            if self._sums.flush_due():
                self._wake.set()
            return True

    def flush(self) -> None:
        """Sends every pending sum now (first any sum still unacknowledged, with its token).

        Raises redis-py's ``ConnectionError``/``TimeoutError`` when the server stays out of
        reach after ``retries`` tries; the unsent sums are kept and go with the next flush. A
        sum held back (its holder out of reach) does not hold back the pending ones: they are
        sent all the same, then its error is raised."""
        with self._flush_lock:
            held: Optional[Exception] = None
            try:
                self._send_unsettled()
            except _RETRYABLE as e:
                held = e
            with self._lock:
                self._sums.seal()
            self._send_unsettled()
            if held is not None:
                raise held

    def _send_unsettled(self) -> None:
        """Sends every unsettled sum; one whose holder stays out of reach is held back (kept,
        same token and holder, for the next flush) while the others go on; then its error is
        raised."""
        sums = self._sums
        held: Deque[_Sum] = deque()
        error: Optional[Exception] = None
        try:
            while sums.unsettled:
                if self._held_back(sums.unsettled[0]):
                    held.append(sums.unsettled.popleft())
                    error = error or TimeoutError(HELD_BACK)
                    continue
                try:
                    self._send_first()
                except _RETRYABLE as e:
                    held.append(sums.unsettled.popleft())
                    error = e
        finally:
            sums.unsettled.extendleft(reversed(held))
        if error is not None:
            raise error

    def _send_first(self) -> None:
        """Sends the first unsettled sum until the server decides on it: applied, refused by a
        bound (on a spread counter by every holder: a holder's refusal sends it on to the next
        by the probe rule), or refused by a final error; a holder folded back sends it on."""
        sums = self._sums
        attempt = 0
        while True:
            s = sums.unsettled[0]
            try:
                if s.target is None:
                    holders = self._reachable(self._ctr._route_holders(s.key))
                    s = sums.unsettled[0] = s.routed(holders)
                sums.stats.commands += 1
                reply = run(self.client, s.call())
                if reply is None:
                    holders = self._ctr._route_holders(s.key)
                    if sums.walked_on(holders, self._reachable(holders)):
                        attempt = 0
                        continue
                sums.settled(reply)
                return
            except HolderFolded as e:
                if not sums.rerouted(e, self._ctr._holders_after_fold(s.key)):
                    return
            except _RETRYABLE as e:
                if self._sent_elsewhere(s, e, self._ctr._route_holders(s.key)):
                    continue
                if attempt == self.retries or timed_out(e):
                    # A reply that timed out: its master is frozen or overloaded (it may still
                    # count the sum); held back at once, the others go on.
                    raise
                sums.stats.retries += 1
                time.sleep(self._backoff_seconds(attempt))
                attempt += 1
            except CtrError as e:
                sums.rejected(e)
                return

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_ms / 1000)
            self._wake.clear()
            if self._closed:
                return
            try:
                self.flush()
                self._sums.last_error = None
            except Exception as e:  # kept for the next tick; the sums stay queued
                self._sums.last_error = e

    def close(self, timeout: Optional[float] = None) -> None:
        """Stops the background thread and flushes what is left. A sum not acknowledged (a
        reply that timed out, a server out of reach) is sent again, with its token, every
        50 ms to 1 s, held back or not, for up to ``timeout`` seconds (default
        ``close_timeout``); then :class:`Undelivered` lists what could not be delivered."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._close_at_exit)
        self._wake.set()
        self._thread.join()
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        for pause in self._close_pauses():
            try:
                self.flush()
                return
            except _RETRYABLE as e:
                if time.monotonic() + pause >= deadline:
                    raise self._undelivered(e) from e
                time.sleep(pause)

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except Exception as e:
            log.error("redis-ctr writer %s: final flush failed: %s", self.writer_id, e)

    def __enter__(self) -> CoalescingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncCoalescingWriter(_Writer[AsyncClient]):
    """The asyncio twin of :class:`CoalescingWriter`, on ``redis.asyncio.Redis`` or
    ``redis.asyncio.RedisCluster``: the same settings, sums, tokens and bounds; the flushes run
    in a task on the event loop, started by the first ``add`` (or ``async with``).

    The flush task runs when the adding code yields to the event loop (any ``await`` that
    suspends): a loop that only awaits ``add`` sends everything at its next real suspension or
    at ``close``. ``add`` is a coroutine because an add of a new key at the cap awaits a flush
    first. Close it with ``await close()`` or ``async with``: no event loop runs at interpreter
    exit, so what is pending then is lost (unlike the thread-based writer).
    """

    def _setup(self) -> None:
        async_client(self.client, "AsyncCoalescingWriter")
        self._ctr = AsyncCtr(self.client, spread_refresh_ms=self.spread_refresh_ms)
        self._flush_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None

    async def add(self, key: KeyT, delta: int = 1) -> None:
        """Adds ``delta`` to ``key``; sent with the next flush."""
        delta = _checked(delta)
        if self._closed:
            raise RuntimeError("add on a closed AsyncCoalescingWriter")
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="redis-ctr-writer")
        if not self._sums.record(key, delta):
            try:
                await self.flush()
            except (ConnectionError, TimeoutError) as e:
                raise self._sums.full(e) from e
            if not self._sums.record(key, delta):
                raise WriterFull(f"{self._sums.max_keys} keys pending")
        if self._sums.flush_due():
            self._wake.set()

    async def flush(self) -> None:
        """Sends every pending sum now; see :meth:`CoalescingWriter.flush`."""
        async with self._flush_lock:
            held: Optional[Exception] = None
            try:
                await self._send_unsettled()
            except _RETRYABLE as e:
                held = e
            self._sums.seal()
            await self._send_unsettled()
            if held is not None:
                raise held

    async def _send_unsettled(self) -> None:
        """See :meth:`CoalescingWriter._send_unsettled`."""
        sums = self._sums
        held: Deque[_Sum] = deque()
        error: Optional[Exception] = None
        try:
            while sums.unsettled:
                if self._held_back(sums.unsettled[0]):
                    held.append(sums.unsettled.popleft())
                    error = error or TimeoutError(HELD_BACK)
                    continue
                try:
                    await self._send_first()
                except _RETRYABLE as e:
                    held.append(sums.unsettled.popleft())
                    error = e
        finally:
            sums.unsettled.extendleft(reversed(held))
        if error is not None:
            raise error

    async def _send_first(self) -> None:
        """See :meth:`CoalescingWriter._send_first`."""
        sums = self._sums
        attempt = 0
        while True:
            s = sums.unsettled[0]
            try:
                if s.target is None:
                    holders = self._reachable(await self._ctr._route_holders(s.key))
                    s = sums.unsettled[0] = s.routed(holders)
                sums.stats.commands += 1
                reply = await run_async(self.client, s.call())
                if reply is None:
                    holders = await self._ctr._route_holders(s.key)
                    if sums.walked_on(holders, self._reachable(holders)):
                        attempt = 0
                        continue
                sums.settled(reply)
                return
            except HolderFolded as e:
                if not sums.rerouted(e, await self._ctr._holders_after_fold(s.key)):
                    return
            except _RETRYABLE as e:
                if self._sent_elsewhere(s, e, await self._ctr._route_holders(s.key)):
                    continue
                if attempt == self.retries or timed_out(e):
                    raise  # timed out: held back at once (see CoalescingWriter._send_first)
                sums.stats.retries += 1
                await asyncio.sleep(self._backoff_seconds(attempt))
                attempt += 1
            except CtrError as e:
                sums.rejected(e)
                return

    async def _run(self) -> None:
        while not self._closed:
            try:
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_ms / 1000)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self._closed:
                return
            try:
                await self.flush()
                self._sums.last_error = None
            except Exception as e:  # kept for the next tick; the sums stay queued
                self._sums.last_error = e

    async def close(self, timeout: Optional[float] = None) -> None:
        """Stops the flush task and flushes what is left, sending again what is not
        acknowledged for up to ``timeout`` seconds (see :meth:`CoalescingWriter.close`)."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._wake.set()
            await self._task
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        for pause in self._close_pauses():
            try:
                await self.flush()
                return
            except _RETRYABLE as e:
                if time.monotonic() + pause >= deadline:
                    raise self._undelivered(e) from e
                await asyncio.sleep(pause)

    async def __aenter__(self) -> AsyncCoalescingWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
