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

import atexit
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Dict, List, Optional

from redis.exceptions import ConnectionError, TimeoutError

from . import _calls
from ._calls import KeyT
from .client import SyncClient, run
from .errors import CtrError

log = logging.getLogger(__name__)

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


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
    """Sums refused by a floor (a negative sum on a floored counter; nil reply): not applied."""
    dropped: int = 0
    """Sums the server refused with an error (wrong type, overflow, token too old): not applied."""


@dataclass(frozen=True)
class _Sum:
    key: KeyT
    delta: int
    token: str
    at: int


class CoalescingWriter:
    """Sums adds per key and flushes them every ``flush_interval_ms`` or every ``flush_every``
    adds, whichever comes first, from a background thread.

    Bounded memory: at most ``max_keys`` keys are summed at a time. An ``add`` of a new key
    when that many are pending flushes first, in the caller's thread; when that flush fails,
    ``add`` raises :class:`WriterFull`. Sums of one key that would leave the 64-bit range are
    flushed first too.

    ``writer_id`` (a random one by default) prefixes every token: two writers alive at the
    same time must never share one. :meth:`close` (also called at interpreter exit, and by
    ``with``) flushes what is left.
    """

    def __init__(
        self,
        client: SyncClient,
        *,
        flush_interval_ms: int = 100,
        flush_every: int = 10_000,
        max_keys: int = 100_000,
        writer_id: Optional[str] = None,
        retries: int = 5,
        retry_backoff_ms: int = 20,
    ) -> None:
        if flush_interval_ms <= 0 or flush_every <= 0 or max_keys <= 0 or retries < 0:
            raise ValueError("flush_interval_ms, flush_every and max_keys must be positive")
        self.client = client
        self.flush_interval_ms = flush_interval_ms
        self.flush_every = flush_every
        self.max_keys = max_keys
        self.writer_id = writer_id or uuid.uuid4().hex[:16]
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.stats = WriterStats()
        self.last_error: Optional[BaseException] = None
        self._pending: Dict[KeyT, int] = {}
        self._since_flush = 0
        self._lock = threading.Lock()
        # One flush at a time; _unacked (sums sent, no reply yet) only changes under it.
        self._flush_lock = threading.Lock()
        self._unacked: List[_Sum] = []
        self._sequence = 0
        self._closed = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-ctr-writer", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    def add(self, key: KeyT, delta: int = 1) -> None:
        """Adds ``delta`` to ``key``; sent with the next flush."""
        if not I64_MIN <= delta <= I64_MAX:
            raise ValueError("delta must be a signed 64-bit integer")
        if self._record(key, delta):
            return
        try:
            self.flush()
        except (ConnectionError, TimeoutError) as e:
            raise WriterFull(f"{self.max_keys} keys pending and the flush failed: {e}") from e
        if not self._record(key, delta):
            raise WriterFull(f"{self.max_keys} keys pending")

    def _record(self, key: KeyT, delta: int) -> bool:
        with self._lock:
            if self._closed:
                raise RuntimeError("add on a closed CoalescingWriter")
            current = self._pending.get(key)
            if current is None and len(self._pending) >= self.max_keys:
                return False
            total = (current or 0) + delta
            if not I64_MIN <= total <= I64_MAX:
                return False
            self._pending[key] = total
            self.stats.adds += 1
            self._since_flush += 1
            if self._since_flush >= self.flush_every:
                self._since_flush = 0
                self._wake.set()
            return True

    def flush(self) -> None:
        """Sends every pending sum now (first any sum still unacknowledged, with its token).

        Raises redis-py's ``ConnectionError``/``TimeoutError`` when the server stays out of
        reach after ``retries`` tries; the unsent sums are kept and go with the next flush."""
        with self._flush_lock:
            self._send_unacked()
            with self._lock:
                pending, self._pending = self._pending, {}
                self._since_flush = 0
            now = int(time.time() * 1000)
            for key, delta in pending.items():
                if delta != 0:
                    self._sequence += 1
                    self._unacked.append(_Sum(key, delta, f"{self.writer_id}:{self._sequence}", now))
            self._send_unacked()

    def _send_unacked(self) -> None:
        while self._unacked:
            self._send(self._unacked[0])
            self._unacked.pop(0)

    def _send(self, s: _Sum) -> None:
        call = _calls.add(s.key, s.delta, token=s.token, at=s.at)
        for attempt in range(self.retries + 1):
            self.stats.commands += 1
            try:
                reply = run(self.client, call)
            except (ConnectionError, TimeoutError):
                if attempt == self.retries:
                    raise
                self.stats.retries += 1
                time.sleep(self.retry_backoff_ms * (attempt + 1) / 1000)
                continue
            except CtrError as e:
                self.stats.dropped += 1
                self.last_error = e
                log.warning("redis-ctr writer: sum %d for %r dropped: %s", s.delta, s.key, e)
                return
            if reply is None:
                self.stats.refused += 1
            else:
                self.stats.flushed_sums += 1
            return

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_ms / 1000)
            self._wake.clear()
            if self._closed:
                return
            try:
                self.flush()
                self.last_error = None
            except Exception as e:  # kept for the next tick; the sums stay queued
                self.last_error = e

    def close(self) -> None:
        """Stops the background thread and flushes what is left (raises if that fails)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._close_at_exit)
        self._wake.set()
        self._thread.join()
        self.flush()

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except Exception as e:
            log.error("redis-ctr writer %s: final flush failed: %s", self.writer_id, e)

    def __enter__(self) -> CoalescingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
