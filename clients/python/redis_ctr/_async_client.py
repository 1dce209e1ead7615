"""The asyncio twins of :class:`redis_ctr.Ctr` and :class:`redis_ctr.Pnc`, on
``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``: the same methods, same arguments and
same normalised replies, awaited. Each method's documentation is its sync twin's. Imported
from :mod:`redis_ctr.asyncio`."""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, TypeVar, Union, overload

from redis.exceptions import ClusterError, ConnectionError, ResponseError, TimeoutError

from . import _calls
from ._budget import DEFAULT_PURCHASE_WAIT, BudgetWait
from ._calls import Call, Increxed, KeyT, Reconciled, Source, Throttled
from ._once import send_and_wait_async, send_once_async
from ._add_route import ROUTED, AddRoute, Done, Pause, Reread, Step
from ._spread import (
    UNREPLICATED_PAUSE,
    UNSPREAD_REFRESH_MS,
    AheadWait,
    HolderCache,
    Holders,
    PurchaseList,
)
from ._spread import holders_of
from .client import DEFAULT_REFRESH_MS, checked_wait, holder_cache, is_pipeline
from .client import DEFAULT_REPLICAS_TIMEOUT_MS, UNLISTED, checked_replicas, durable_grant
from .client import names_like, refused
from .errors import (
    BudgetInFlight,
    HolderFolded,
    HolderMoving,
    HoldersAhead,
    HoldersUnreplicated,
    RefundAwaitsFold,
    RefundFolded,
    UseHomeKey,
)
from .errors import classify, classify_cluster
from .types import CounterInfo, PncInfo

if TYPE_CHECKING:
    import redis.asyncio
    import redis.asyncio.cluster

    from .pipeline import AsyncCtrPipeline

T = TypeVar("T")


AsyncClient = Union["redis.asyncio.Redis", "redis.asyncio.cluster.RedisCluster"]
"""The clients :class:`AsyncCtr`, :class:`AsyncPnc` and the asyncio writer take: redis-py's
``redis.asyncio.Redis`` or ``RedisCluster``. A sync client or a pipeline is refused
(``TypeError``): queue commands on a pipeline with :class:`redis_ctr.asyncio.AsyncCtrPipeline`."""


def async_client(client: AsyncClient, what: str) -> AsyncClient:
    """``client`` when it is an asyncio client; ``TypeError`` for a sync one or a pipeline."""
    if is_pipeline(client):
        raise TypeError(
            f"{what} takes a client, not a pipeline ({type(client).__name__}): queue the "
            "commands with redis_ctr.asyncio.AsyncCtrPipeline(pipeline) (or "
            f"{what}(client).pipeline()), whose execute() returns the typed replies"
        )
    if not inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
        raise TypeError(
            f"{what} needs a redis.asyncio client, not {type(client).__name__}: use "
            f"redis_ctr.{what[len('Async'):]} on a sync client"
        )
    return client


async def run(client: AsyncClient, call: Call[T]) -> T:
    """Sends one command and normalises its reply; the module's errors become its classes."""
    try:
        if call.write:
            raw = await send_once_async(client, call)  # see redis_ctr._once
        else:
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
        unspread_refresh_ms: int = UNSPREAD_REFRESH_MS,
    ) -> None:
        self.client = async_client(client, "AsyncCtr")
        self._holders = holder_cache(spread_refresh_ms, self.client, unspread_refresh_ms)
        self.purchase_wait = checked_wait(purchase_wait)
        self._refreshing: Dict[KeyT, asyncio.Task[Holders]] = {}

    def pipeline(self, transaction: bool = True) -> AsyncCtrPipeline:
        """An :class:`~redis_ctr.asyncio.AsyncCtrPipeline` on a new pipeline of this client
        (see :meth:`redis_ctr.Ctr.pipeline`); ``await execute()`` returns the typed replies."""
        from .pipeline import AsyncCtrPipeline

        return AsyncCtrPipeline(self.client.pipeline(transaction=transaction))

    @overload
    async def holders(self, key: str, *, at: Optional[int] = None) -> List[str]: ...
    @overload
    async def holders(self, key: bytes, *, at: Optional[int] = None) -> List[bytes]: ...
    async def holders(self, key: KeyT, *, at: Optional[int] = None) -> List[Any]:
        """The holders the adds of ``key`` go to (see :meth:`redis_ctr.Ctr.holders`): one
        ``CTR.HOLDERS`` at a time per key, awaited by every add that finds the cache stale.
        With ``at``: the holders in force at that time, read now."""
        if at is not None:
            names = await run(self.client, _calls.holders(key, at))
            return names_like(key, holders_of(names, key))
        return names_like(key, await self._route_holders(key))

    async def _route_holders(self, key: KeyT) -> Holders:
        """The holders adds of ``key`` go to, as the cache keeps them."""
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

    async def _purchase_list(self, key: KeyT, at: Optional[int]) -> PurchaseList:
        """See :meth:`redis_ctr.Ctr._purchase_list`."""
        if at is None:
            return None, await self._route_holders(key)
        wait = AheadWait(at, self.purchase_wait)
        while True:
            try:
                names = await run(self.client, _calls.holders(key, at))
                return at, holders_of(names, key)
            except HoldersAhead as e:
                await asyncio.sleep(wait.after(e))
            except HoldersUnreplicated as e:
                await asyncio.sleep(wait.within(UNREPLICATED_PAUSE, e))
            except UNLISTED:
                return at, await self._route_holders(key)

    async def _holders_after_fold(self, key: KeyT) -> Holders:
        """The holders of ``key`` read again (not from the cache): a write met one of them
        folded back into the home, so the cached list is out of date."""
        if self._holders is not None:
            self._holders.forget(key)
        return await self._route_holders(key)

    @overload
    async def add(
        self,
        key: KeyT,
        delta: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        ex: Optional[int] = None,
        px: Optional[int] = None,
        exat: Optional[int] = None,
        pxat: Optional[int] = None,
        persist: bool = False,
        enx: bool = False,
        refusable: Literal[False] = False,
    ) -> int: ...
    @overload
    async def add(
        self,
        key: KeyT,
        delta: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        ex: Optional[int] = None,
        px: Optional[int] = None,
        exat: Optional[int] = None,
        pxat: Optional[int] = None,
        persist: bool = False,
        enx: bool = False,
        refusable: bool,
    ) -> Optional[int]: ...
    async def add(
        self,
        key: KeyT,
        delta: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        ex: Optional[int] = None,
        px: Optional[int] = None,
        exat: Optional[int] = None,
        pxat: Optional[int] = None,
        persist: bool = False,
        enx: bool = False,
        refusable: bool = False,
    ) -> Optional[int]:
        """``CTR.ADD`` (see :meth:`redis_ctr.Ctr.add`: spread over a spread counter's holders,
        and walked on over them when a holder of a bounded spread refuses it; a bound's refusal
        raises ``FloorRefused`` or ``CeilingRefused`` unless ``refusable=True``)."""
        # TypeError (not an int) or ValueError (options the module refuses) here, before any I/O
        call = _calls.add(key, delta, token, at, ex, px, exat, pxat, persist, enx)
        value = await self._add(
            key, call, token, _calls.changes_ttl(ex, px, exat, pxat, persist, enx)
        )
        if value is None and not refusable:
            raise refused(key, delta)
        return value

    async def _add(
        self, key: KeyT, call: Call[Optional[int]], token: Optional[KeyT], with_ttl: bool
    ) -> Optional[int]:
        """See :meth:`redis_ctr.Ctr._add`."""
        cache = self._holders
        if cache is None or with_ttl:
            return await run(self.client, call)
        if token is None and cache.cold(key):
            route = AddRoute(cache, key, None, None, self.purchase_wait)
        else:
            holders = await self._route_holders(key)
            route = AddRoute(cache, key, token, holders, self.purchase_wait)
        while True:
            try:
                value = await run(self.client, call.on(route.target))
            except ROUTED as e:
                done = await self._follow(route, route.failed(e))
            else:
                done = await self._follow(route, route.replied(value))
            if done is not None:
                return done.value

    async def _follow(self, route: AddRoute, step: Step) -> Optional[Done]:
        """See :meth:`redis_ctr.Ctr._follow`."""
        while isinstance(step, Reread):
            step = route.reread(await self._route_holders(route.key))
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
        return step if isinstance(step, Done) else None

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

    async def ceil(self, key: KeyT, ceiling: Optional[int]) -> None:
        """``CTR.CEIL`` (None removes the ceiling)."""
        await run(self.client, _calls.ceil(key, ceiling))

    async def increx(
        self,
        key: KeyT,
        by: int = 1,
        *,
        lbound: Optional[int] = None,
        ubound: Optional[int] = None,
        saturate: bool = False,
        ex: Optional[int] = None,
        px: Optional[int] = None,
        exat: Optional[int] = None,
        pxat: Optional[int] = None,
        persist: bool = False,
        enx: bool = False,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
    ) -> Increxed:
        """``CTR.INCREX`` (see :meth:`redis_ctr.Ctr.increx`)."""
        call = _calls.increx(
            key, by, lbound, ubound, saturate, ex, px, exat, pxat, persist, enx, token, at
        )
        return await run(self.client, call)

    async def refund(
        self, key: KeyT, token: KeyT, *, at: Optional[int] = None
    ) -> Optional[int]:
        """``CTR.REFUND``: the units given back, None without a grant (on a spread counter, at
        the holder that granted the token, found by the purchase's probe walk: see
        :meth:`redis_ctr.Ctr.refund`)."""
        call = _calls.refund(key, token)
        cache = self._holders
        if cache is None:
            return await run(self.client, call)
        listed = cache.remembered_purchase(key, token, at) or await self._purchase_list(key, at)
        for holder in cache.probe_targets(key, listed, token, at)[1]:
            units = await self._refund(call.on(holder), key)
            if units is not None:
                return units
        return None

    async def _refund(self, call: Call[Optional[int]], home: KeyT) -> Optional[int]:
        """See :meth:`redis_ctr.Ctr._refund`."""
        wait = BudgetWait(self.purchase_wait, call.args[1], RefundAwaitsFold)
        while True:
            try:
                return await run(self.client, call)
            except RefundFolded as e:
                sent = e.sent_home()
                if sent is None:
                    raise
                await run(self.client, _calls.add(home, sent[0], token=sent[1]))
                return sent[0]
            except (BudgetInFlight, HolderMoving, ClusterError) as e:
                await asyncio.sleep(wait.pause_after(e))

    async def throttle(
        self,
        key: KeyT,
        max_burst: int,
        count: int,
        period: int,
        quantity: int = 1,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
    ) -> Throttled:
        """``CTR.THROTTLE`` (see :meth:`redis_ctr.Ctr.throttle`)."""
        call = _calls.throttle(key, max_burst, count, period, quantity, token, at)
        return await run(self.client, call)

    async def window(
        self, key: KeyT, window_ms: Optional[int], *, buckets: Optional[int] = None
    ) -> None:
        """``CTR.WINDOW`` (see :meth:`redis_ctr.Ctr.window`)."""
        await run(self.client, _calls.window(key, window_ms, buckets))

    async def decrfloor(
        self,
        key: KeyT,
        amount: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        replicas: int = 0,
        replicas_timeout_ms: int = DEFAULT_REPLICAS_TIMEOUT_MS,
    ) -> Optional[int]:
        """``CTR.DECRFLOOR``: the new value (on a spread counter what the granting holder can
        still sell), or None when refused (a purchase by the probe rule on a spread counter:
        with a token and ``at``, over the holders in force at ``at``, ``CTR.HOLDERS key AT at``,
        so that a retry from any process with the same ``token`` and ``at`` walks the same
        list; with a token and no ``at``, over the current holders, a retry safe through this
        client only; a holder folded back passed as a refusal; a holder whose budget is in
        flight asked again for up to ``purchase_wait``; durable with ``replicas=N``: see
        :meth:`redis_ctr.Ctr.decrfloor`)."""
        call = _calls.decrfloor(key, amount, token, at)  # TypeError here, before any I/O
        checked_replicas(replicas, replicas_timeout_ms)
        cache = self._holders
        if cache is None:
            return await self._purchase(call, replicas, replicas_timeout_ms)
        if token is None:
            listed: PurchaseList = (at, await self._route_holders(key))
        else:
            remembered = cache.remembered_purchase(key, token, at)
            listed = remembered or await self._purchase_list(key, at)
        sent_at, targets = cache.probe_targets(key, listed, token, at)
        call = _calls.decrfloor(key, amount, token, sent_at)
        for holder in targets:
            try:
                value = await self._purchase(call.on(holder), replicas, replicas_timeout_ms)
            except HolderFolded:
                if holder == key:
                    raise
                if token is None:
                    cache.forget(key)  # a stale list: read again next time
                continue  # folded back since the list was read: see Ctr.decrfloor
            if value is not None:
                return value
        return None

    async def _purchase(
        self, call: Call[Optional[int]], replicas: int, timeout_ms: int
    ) -> Optional[int]:
        """One holder's ``CTR.DECRFLOOR`` (with its ``WAIT`` when durable), asked again while
        its budget is in flight."""
        wait = BudgetWait(self.purchase_wait, call.args[1])
        while True:
            try:
                if replicas:
                    return await self._durable(call, replicas, timeout_ms)
                return await run(self.client, call)
            except (BudgetInFlight, HolderMoving, ClusterError) as e:
                await asyncio.sleep(wait.pause_after(e))

    async def _durable(self, call: Call[Optional[int]], replicas: int, timeout_ms: int) -> Optional[int]:
        """See :func:`redis_ctr.client.run_durable`."""
        try:
            raw, acknowledged = await send_and_wait_async(self.client, call, replicas, timeout_ms)
        except ResponseError as e:
            raise classify(e) from e
        except ClusterError as e:
            raise classify_cluster(e) from e
        return durable_grant(call, raw, acknowledged, replicas)

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

    @overload
    async def spread(self, key: str, holders: int) -> List[str]: ...
    @overload
    async def spread(self, key: bytes, holders: int) -> List[bytes]: ...
    async def spread(self, key: KeyT, holders: int) -> List[Any]:
        """``CTR.SPREAD key holders``: every holder's name, the home first, in the type of
        ``key``."""
        names = await run(self.client, _calls.spread(key, holders))
        if self._holders is not None:
            self._holders.learned(key, names_like(key, tuple(names)))
        return names

    async def info(self, key: KeyT) -> Optional[CounterInfo]:
        """``CTR.INFO`` as a dict, or None when the key is missing."""
        return await run(self.client, _calls.info(key))


class AsyncPnc:
    """``PNC.*`` commands on a redis-py asyncio client (see :class:`redis_ctr.Pnc`)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = async_client(client, "AsyncPnc")

    def pipeline(self, transaction: bool = True) -> AsyncCtrPipeline:
        """An :class:`~redis_ctr.asyncio.AsyncCtrPipeline` (its ``pnc_*`` methods) on a new
        pipeline of this client."""
        from .pipeline import AsyncCtrPipeline

        return AsyncCtrPipeline(self.client.pipeline(transaction=transaction))

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

    async def floor(self, key: KeyT, floor: Optional[int]) -> None:
        """``PNC.FLOOR``."""
        return await run(self.client, _calls.pnc_floor(key, floor))

    async def decrfloor(
        self, key: KeyT, amount: int, *, token: Optional[KeyT] = None
    ) -> Optional[int]:
        """``PNC.DECRFLOOR``: the new value, or None when refused here."""
        return await run(self.client, _calls.pnc_decrfloor(key, amount, token))

    async def give(self, key: KeyT, to_replica: KeyT, amount: int) -> Optional[int]:
        """``PNC.GIVE``: the rights left here, or None."""
        return await run(self.client, _calls.pnc_give(key, to_replica, amount))
