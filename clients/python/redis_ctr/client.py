"""Typed CTR.* and PNC.* commands on a redis-py client (``redis.Redis`` or ``RedisCluster``)."""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, TypeVar

from redis.exceptions import ResponseError

from . import _calls
from ._calls import Call, KeyT, Reconciled, Source
from .errors import classify
from .types import CounterInfo, PncInfo

T = TypeVar("T")


class SyncClient(Protocol):
    """What the library needs of a client: redis-py's ``execute_command``."""

    def execute_command(self, *args: Any, **options: Any) -> Any: ...


def run(client: SyncClient, call: Call[T]) -> T:
    """Sends one command and normalises its reply; the module's errors become its classes."""
    try:
        raw = client.execute_command(*call.args, **call.options)
    except ResponseError as e:
        raise classify(e) from e
    return call.parse(raw)


class Ctr:
    """``CTR.*`` commands on a redis-py client.

    >>> ctr = Ctr(redis.Redis(protocol=3))
    >>> ctr.add("page:views", 1)
    1

    The client's protocol (2 or 3) and ``decode_responses`` do not change what the methods
    return. With a ``RedisCluster`` every command goes to the master of its key's slot; keys a
    command uses together (``mget``, ``reconcile_from``) must share a ``{hash tag}``.
    """

    def __init__(self, client: SyncClient) -> None:
        self.client = client

    def add(
        self,
        key: KeyT,
        delta: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        ex: Optional[int] = None,
        px: Optional[int] = None,
    ) -> Optional[int]:
        """``CTR.ADD``: adds ``delta`` and returns the new value.

        ``token`` makes a retry count once (inside ``ctr.token-window-ms``); ``at`` is the
        event's time (unix ms); ``ex``/``px`` set a TTL only when this call creates the key.
        Returns None when a negative delta is refused by the counter's floor (nothing changed).
        """
        return run(self.client, _calls.add(key, delta, token, at, ex, px))

    def get(self, key: KeyT) -> int:
        """``CTR.GET``: the value, 0 when the key is missing."""
        return run(self.client, _calls.get(key))

    def mget(self, *keys: KeyT) -> List[int]:
        """``CTR.MGET``: one value per key, in order (0 for a missing key)."""
        return run(self.client, _calls.mget(keys))

    def clear(self, key: KeyT, *, token: Optional[KeyT] = None) -> int:
        """``CTR.CLEAR``: resets the value to 0 (keeping the floor); returns the value before."""
        return run(self.client, _calls.clear(key, token))

    def floor(self, key: KeyT, floor: Optional[int]) -> None:
        """``CTR.FLOOR``: sets the floor no command can cross; None removes it.

        Raises :class:`~redis_ctr.errors.BelowFloor` when the value is already below it."""
        run(self.client, _calls.floor(key, floor))

    def decrfloor(
        self, key: KeyT, amount: int, *, token: Optional[KeyT] = None, at: Optional[int] = None
    ) -> Optional[int]:
        """``CTR.DECRFLOOR``: takes ``amount`` (positive) only if the value stays at or above
        the floor; the new value, or None when refused. With ``token``, a retry returns the
        first outcome (value or None) again."""
        return run(self.client, _calls.decrfloor(key, amount, token, at))

    def reconcile(self, key: KeyT, truth: int, *, at: Optional[int] = None) -> Reconciled:
        """``CTR.RECONCILE key truth [AT at]``: repairs the counter from the true count of the
        events at or before ``at`` (without ``at``: an overwrite)."""
        return run(self.client, _calls.reconcile(key, truth, at))

    def reconcile_from(
        self, key: KeyT, kind: Source, source: KeyT, *, at: Optional[int] = None
    ) -> Reconciled:
        """``CTR.RECONCILE key FROM STREAM|ZSET|SET source [AT at]``: the truth counted by the
        server from ``source`` (in the counter's hash slot)."""
        return run(self.client, _calls.reconcile_from(key, kind, source, at))

    def info(self, key: KeyT) -> Optional[CounterInfo]:
        """``CTR.INFO`` as a dict (str keys), or None when the key is missing."""
        return run(self.client, _calls.info(key))


class Pnc:
    """``PNC.*`` commands (PN-counter CRDT) on a redis-py client."""

    def __init__(self, client: SyncClient) -> None:
        self.client = client

    def add(self, key: KeyT, delta: int) -> int:
        """``PNC.ADD``: adds to this deployment's slot; returns the new value."""
        return run(self.client, _calls.pnc_add(key, delta))

    def get(self, key: KeyT) -> int:
        """``PNC.GET``: the value, 0 when the key is missing."""
        return run(self.client, _calls.pnc_get(key))

    def state(self, key: KeyT) -> Optional[bytes]:
        """``PNC.STATE``: the whole state as bytes for :meth:`merge` elsewhere; None when the
        key is missing."""
        return run(self.client, _calls.pnc_state(key))

    def merge(self, key: KeyT, state: bytes) -> int:
        """``PNC.MERGE``: merges a :meth:`state` blob; returns the new value."""
        return run(self.client, _calls.pnc_merge(key, state))

    def clear(self, key: KeyT) -> int:
        """``PNC.CLEAR``: observed reset; returns the value before."""
        return run(self.client, _calls.pnc_clear(key))

    def info(self, key: KeyT) -> PncInfo:
        """``PNC.INFO`` as a dict; works on a missing key (value 0, no replicas)."""
        return run(self.client, _calls.pnc_info(key))
