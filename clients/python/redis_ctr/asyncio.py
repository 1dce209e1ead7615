"""The asyncio twins of :class:`redis_ctr.Ctr` and :class:`redis_ctr.Pnc`, on
``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``: the same methods, same arguments and
same normalised replies, awaited. Each method's documentation is its sync twin's."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Dict, List, Optional, Protocol, TypeVar

from redis.exceptions import ClusterError, ConnectionError, MovedError, ResponseError, TimeoutError

from . import _calls
from ._budget import DEFAULT_PURCHASE_WAIT, BudgetWait
from ._calls import Call, KeyT, Reconciled, Source
from ._spread import HolderCache, Holders
from .client import DEFAULT_REFRESH_MS, away_for_ms, checked_wait, holder_cache, not_run
from .errors import BudgetInFlight, HolderFolded, HolderMoving, UseHomeKey, classify
from .errors import classify_cluster
from .types import CounterInfo, PncInfo

T = TypeVar("T")


class AsyncClient(Protocol):
    """What the library needs of an asyncio client: redis-py's ``execute_command``."""

    def execute_command(self, *args: Any, **options: Any) -> Awaitable[Any]: ...


async def run(client: AsyncClient, call: Call[T]) -> T:
    """Sends one command and normalises its reply; the module's errors become its classes."""
    try:
        raw = await client.execute_command(*call.args, **call.options)
    except ResponseError as e:
        raise classify(e) from e
    except ClusterError as e:
        raise classify_cluster(e) from e
    return call.parse(raw)


class AsyncCtr:
    """``CTR.*`` commands on a redis-py asyncio client (see :class:`redis_ctr.Ctr`, spread
    counters and ``purchase_wait`` included)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        spread_refresh_ms: Optional[int] = DEFAULT_REFRESH_MS,
        purchase_wait: float = DEFAULT_PURCHASE_WAIT,
    ) -> None:
        self.client = client
        self._holders = holder_cache(spread_refresh_ms)
        self.purchase_wait = checked_wait(purchase_wait)
        self._refreshing: Dict[KeyT, asyncio.Task[Holders]] = {}

    async def holders(self, key: KeyT) -> Holders:
        """The holders the adds of ``key`` go to (see :meth:`redis_ctr.Ctr.holders`): one
        ``CTR.HOLDERS`` at a time per key, awaited by every add that finds the cache stale."""
        cache = self._holders
        if cache is None:
            return (key,)
        known = cache.fresh(key)
        if known is not None:
            return known
        task = self._refreshing.get(key)
        if task is None:
            task = asyncio.ensure_future(self._read_holders(cache, key))
            self._refreshing[key] = task
            task.add_done_callback(lambda _: self._refreshing.pop(key, None))
        return await asyncio.shield(task)

    async def _read_holders(self, cache: HolderCache, key: KeyT) -> Holders:
        try:
            names = await run(self.client, _calls.holders(key))
        except UseHomeKey:
            return cache.learned(key, None)  # a holder's name: written as it is
        except (ResponseError, ConnectionError, TimeoutError, HolderMoving, ClusterError):
            return cache.learned(key, None, failed=True)
        return cache.learned(key, names)

    async def _holders_after_fold(self, key: KeyT) -> Holders:
        """The holders of ``key`` read again (not from the cache): a write met one of them
        folded back into the home, so the cached list is out of date."""
        if self._holders is not None:
            self._holders.forget(key)
        return await self.holders(key)

    async def add(
        self,
        key: KeyT,
        delta: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        ex: Optional[int] = None,
        px: Optional[int] = None,
    ) -> Optional[int]:
        """``CTR.ADD`` (see :meth:`redis_ctr.Ctr.add`: spread over a spread counter's holders)."""
        call = _calls.add(key, delta, token, at, ex, px)  # TypeError here, before any I/O
        cache = self._holders
        if cache is None or ex is not None or px is not None:
            return await run(self.client, call)
        holders = await self.holders(key)
        retry = cache.remembers(key, token)
        target = cache.target(key, holders, token)
        folded: List[KeyT] = []
        while True:
            try:
                return await run(self.client, call.on(target))
            except HolderFolded:
                if target == key:
                    raise
                folded.append(target)
                target = cache.retarget(key, await self._holders_after_fold(key), token, folded)
            except (MovedError, ConnectionError, TimeoutError) as e:
                if target == key or retry or not not_run(e):
                    raise
                cache.unreachable(target, away_for_ms(e))
                folded.append(target)
                target = cache.retarget(key, holders, token, folded)

    async def get(self, key: KeyT) -> int:
        """``CTR.GET``."""
        return await run(self.client, _calls.get(key))

    async def mget(self, *keys: KeyT) -> List[int]:
        """``CTR.MGET``."""
        return await run(self.client, _calls.mget(keys))

    async def clear(self, key: KeyT, *, token: Optional[KeyT] = None) -> int:
        """``CTR.CLEAR``."""
        return await run(self.client, _calls.clear(key, token))

    async def floor(self, key: KeyT, floor: Optional[int]) -> None:
        """``CTR.FLOOR`` (None removes the floor)."""
        await run(self.client, _calls.floor(key, floor))

    async def decrfloor(
        self, key: KeyT, amount: int, *, token: Optional[KeyT] = None, at: Optional[int] = None
    ) -> Optional[int]:
        """``CTR.DECRFLOOR``: the new value, or None when refused (a purchase by the probe rule
        on a spread counter, a holder whose budget is in flight asked again for up to
        ``purchase_wait``: see :meth:`redis_ctr.Ctr.decrfloor`)."""
        call = _calls.decrfloor(key, amount, token, at)  # TypeError here, before any I/O
        cache = self._holders
        if cache is None:
            return await self._purchase(call)
        holders = cache.remembered_purchase(key, token) or await self.holders(key)
        for holder in cache.probe_targets(key, holders, token):
            value = await self._purchase(call.on(holder))
            if value is not None:
                return value
        return None

    async def _purchase(self, call: Call[Optional[int]]) -> Optional[int]:
        """One holder's ``CTR.DECRFLOOR``, asked again while its budget is in flight."""
        wait = BudgetWait(self.purchase_wait, call.args[1])
        while True:
            try:
                return await run(self.client, call)
            except (BudgetInFlight, HolderMoving, ClusterError) as e:
                await asyncio.sleep(wait.pause_after(e))

    async def reconcile(self, key: KeyT, truth: int, *, at: Optional[int] = None) -> Reconciled:
        """``CTR.RECONCILE key truth [AT at]``."""
        return await run(self.client, _calls.reconcile(key, truth, at))

    async def reconcile_from(
        self, key: KeyT, kind: Source, source: KeyT, *, at: Optional[int] = None
    ) -> Reconciled:
        """``CTR.RECONCILE key FROM kind source [AT at]``."""
        return await run(self.client, _calls.reconcile_from(key, kind, source, at))

    async def reconcile_start(self, key: KeyT) -> int:
        """``CTR.RECONCILE key START``: the earliest watermark a reconcile ``AT`` accepts."""
        return await run(self.client, _calls.reconcile_start(key))

    async def spread(self, key: KeyT, holders: int) -> List[str]:
        """``CTR.SPREAD key holders``: every holder's name, the home first."""
        names = await run(self.client, _calls.spread(key, holders))
        if self._holders is not None:
            self._holders.learned(key, names)
        return names

    async def info(self, key: KeyT) -> Optional[CounterInfo]:
        """``CTR.INFO`` as a dict, or None when the key is missing."""
        return await run(self.client, _calls.info(key))


class AsyncPnc:
    """``PNC.*`` commands on a redis-py asyncio client (see :class:`redis_ctr.Pnc`)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def add(self, key: KeyT, delta: int) -> int:
        """``PNC.ADD``."""
        return await run(self.client, _calls.pnc_add(key, delta))

    async def get(self, key: KeyT) -> int:
        """``PNC.GET``."""
        return await run(self.client, _calls.pnc_get(key))

    async def state(self, key: KeyT) -> Optional[bytes]:
        """``PNC.STATE`` as bytes, or None when the key is missing."""
        return await run(self.client, _calls.pnc_state(key))

    async def merge(self, key: KeyT, state: bytes) -> int:
        """``PNC.MERGE``."""
        return await run(self.client, _calls.pnc_merge(key, state))

    async def clear(self, key: KeyT) -> int:
        """``PNC.CLEAR``."""
        return await run(self.client, _calls.pnc_clear(key))

    async def info(self, key: KeyT) -> PncInfo:
        """``PNC.INFO`` as a dict."""
        return await run(self.client, _calls.pnc_info(key))
