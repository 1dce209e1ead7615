"""Typed CTR.* and PNC.* commands on a redis-py client (``redis.Redis`` or ``RedisCluster``)."""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any, Callable, List, Literal, Optional, TypeVar, Union, overload

from redis.exceptions import ClusterError, ConnectionError, ResponseError, TimeoutError

from . import _calls
from ._budget import DEFAULT_PURCHASE_WAIT, BudgetWait
from ._calls import Call, Increxed, KeyT, Reconciled, Source, Throttled
from ._once import send_and_wait, send_once
from ._add_route import ROUTED, AddRoute, Done, Pause, Reread, Step
from ._spread import (
    UNREPLICATED_PAUSE,
    UNSPREAD_REFRESH_MS,
    AheadWait,
    HolderCache,
)
from ._spread import Holders, PurchaseList, holders_of
from .errors import (
    BudgetInFlight,
    CeilingRefused,
    CtrSyntaxError,
    FloorRefused,
    HolderFolded,
    HolderMoving,
    HoldersAhead,
    HoldersUnreplicated,
    HoldersUnknown,
    NotDurable,
    RefundAwaitsFold,
    RefundFolded,
    WrongType,
)
from .errors import UseHomeKey
from .errors import classify, classify_cluster
from .types import CounterInfo, PncInfo

if TYPE_CHECKING:
    from .pipeline import CtrPipeline

T = TypeVar("T")


if TYPE_CHECKING:
    import redis
    import redis.cluster

SyncClient = Union["redis.Redis", "redis.cluster.RedisCluster"]
"""The clients :class:`Ctr`, :class:`Pnc` and the coalescing writer take: redis-py's sync
``Redis`` or ``RedisCluster`` (or a subclass). An asyncio client is refused (``TypeError``), and
so is a pipeline: queue commands on one with :class:`redis_ctr.CtrPipeline`."""


def is_pipeline(client: object) -> bool:
    """True for a redis-py pipeline (sync or asyncio, cluster or not)."""
    from redis.asyncio.client import Pipeline as AsyncPipeline
    from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    return isinstance(client, (Pipeline, ClusterPipeline, AsyncPipeline, AsyncClusterPipeline))


def sync_client(client: SyncClient, what: str) -> SyncClient:
    """``client`` when it is a sync client; ``TypeError`` for an asyncio one or a pipeline,
    at construction, not at the first command."""
    if is_pipeline(client):
        raise TypeError(
            f"{what} sends each command at once and returns its reply, so it takes a client, "
            f"not a pipeline ({type(client).__name__}): queue the commands with "
            "redis_ctr.CtrPipeline(pipeline) (or Ctr(client).pipeline()), whose execute() "
            "returns the typed replies"
        )
    if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
        raise TypeError(
            f"{what} needs a sync redis-py client, not {type(client).__name__} (asyncio): "
            f"use redis_ctr.asyncio.Async{what}"
        )
    if not callable(getattr(client, "execute_command", None)):
        raise TypeError(f"{what} needs a redis-py client, not {type(client).__name__}")
    return client


def names_like(key: KeyT, names: Holders) -> List[Any]:
    """Holder names in the type of the key given: str for a str key, bytes for a bytes key."""
    if isinstance(key, bytes):
        return [n.encode("utf-8") if isinstance(n, str) else n for n in names]
    return [n.decode("utf-8") if isinstance(n, bytes) else n for n in names]


def refused(key: KeyT, delta: int) -> Union[FloorRefused, CeilingRefused]:
    """The error of an add the floor (a negative delta) or the ceiling (a positive one)
    refused (a nil reply), for ``add`` without ``refusable=True``."""
    name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    bound, error = ("ceiling", CeilingRefused) if delta > 0 else ("floor", FloorRefused)
    return error(
        f"add of {delta} to '{name}' refused by the counter's {bound} (nothing changed); "
        "add(..., refusable=True) returns None instead"
    )


def run(client: SyncClient, call: Call[T]) -> T:
    """Sends one command and normalises its reply; the module's errors become its classes. A
    write is sent once (:mod:`redis_ctr._once`): a reply that timed out raises redis-py's
    ``TimeoutError``, the write counted once or not at all."""
    try:
        if call.write:
            raw = send_once(client, call)
        else:
            # redis-py's execute_command is not annotated (RedisCluster's is).
            send: Any = client.execute_command
            raw = send(*call.args, **call.options)
    except ResponseError as e:
        raise classify(e) from e
    except ClusterError as e:
        raise classify_cluster(e) from e
    return call.parse(raw)


DEFAULT_REPLICAS_TIMEOUT_MS = 1000


def durable_grant(call: Call[Optional[int]], raw: Any, acknowledged: int, replicas: int) -> Optional[int]:
    """The reply of a durable purchase: its value, or :class:`NotDurable` for a grant fewer
    than ``replicas`` replicas acknowledged (a refusal is returned as it is)."""
    value = call.parse(raw)
    if value is not None and acknowledged < replicas:
        raise NotDurable(call.args[1], value, acknowledged, replicas)
    return value


def run_durable(
    client: SyncClient, call: Call[Optional[int]], replicas: int, timeout_ms: int
) -> Optional[int]:
    """A purchase sent once, then ``WAIT replicas timeout_ms`` on the same connection
    (:func:`redis_ctr._once.send_and_wait`); see :func:`durable_grant`."""
    try:
        raw, acknowledged = send_and_wait(client, call, replicas, timeout_ms)
    except ResponseError as e:
        raise classify(e) from e
    except ClusterError as e:
        raise classify_cluster(e) from e
    return durable_grant(call, raw, acknowledged, replicas)


def checked_replicas(replicas: int, timeout_ms: int) -> None:
    """``TypeError``/``ValueError`` for a durable purchase's settings, before any I/O."""
    if _calls.integer("replicas", replicas) < 0 or _calls.integer("timeout", timeout_ms) < 0:
        raise ValueError("replicas and replicas_timeout_ms must not be negative")


def slot_map_lookup(client: Any) -> Optional[Callable[[KeyT], Optional[str]]]:
    """For a cluster client (sync or asyncio ``RedisCluster``): the ``host:port`` of the master
    its slot map gives for a key, read locally (no I/O). None for any other client."""
    node_from_key = getattr(client, "get_node_from_key", None)
    if node_from_key is None:
        return None

    def node_of(key: KeyT) -> Optional[str]:
        try:
            node = node_from_key(key)
        except Exception:  # a slot map being refreshed, a slot with no owner
            return None
        name = getattr(node, "name", None)
        return name if isinstance(name, str) else None

    return node_of


DEFAULT_REFRESH_MS = 1000


def holder_cache(
    spread_refresh_ms: Optional[int],
    client: Any = None,
    unspread_refresh_ms: int = UNSPREAD_REFRESH_MS,
) -> Optional[HolderCache]:
    """The cache of a spread-aware client; None for a client that writes the key given."""
    if spread_refresh_ms is None:
        return None
    return HolderCache(
        spread_refresh_ms,
        node_of=slot_map_lookup(client),
        unspread_refresh_ms=unspread_refresh_ms,
    )


UNLISTED = (HoldersUnknown, CtrSyntaxError, UseHomeKey, WrongType)
"""What ``CTR.HOLDERS key AT at`` answers when the home has no list for a time: a home that
keeps no record of that time (spread by an earlier version), a module from before ``AT`` (the
arity error), a holder's name, another type. The purchase then walks the current holders with
the caller's ``at``, as before the lists had times (the purchase itself reports a real error)."""


def checked_wait(purchase_wait: float) -> float:
    """A ``purchase_wait`` argument, refused when negative."""
    if purchase_wait < 0:
        raise ValueError("purchase_wait must not be negative")
    return purchase_wait


class Ctr:
    """``CTR.*`` commands on a redis-py client.

    >>> ctr = Ctr(redis.Redis(protocol=3))
    >>> ctr.add("page:views", 1)
    1

    The client's protocol (2 or 3) and ``decode_responses`` do not change what the methods
    return. With a ``RedisCluster`` every command goes to the master of its key's slot; keys a
    command uses together (``mget``, ``reconcile_from``) must share a ``{hash tag}``.

    Spread counters: :meth:`add` sends an add of a spread counter to one of its holders (a
    random one; with a token, the token's holder), learned from ``CTR.HOLDERS`` and trusted for
    ``spread_refresh_ms`` (default 1000; the first add after that reads ``CTR.HOLDERS`` again, so
    a counter spread since, e.g. an auto-spread, is written over its holders within that
    time). Reads (:meth:`get`, :meth:`mget`, :meth:`info`) go to the home key, which replies
    the total. ``spread_refresh_ms=None`` sends every add to the key given (no ``CTR.HOLDERS``).
    A counter that is not spread costs one command per untokened add: such an add of a key
    whose holders were never read goes to the key given until this client has added to it 8
    times, and a key found not spread is trusted for ``unspread_refresh_ms`` (default 30,000).

    An add that a holder of a bounded spread counter refuses (nil: its share of the ceiling's
    room or of the floor's budget is used up) walks on over the other holders by the probe rule
    and is refused only when every holder refused (see :meth:`add`).

    Purchases (:meth:`decrfloor`) of a spread counter walk its holders by the probe rule; a
    tokened one given ``at`` walks those in force at that time (``CTR.HOLDERS key AT at``), so
    that a retry with the same token and ``at`` walks them again, from any process.

    Every write is sent once (:mod:`redis_ctr._once`): a reply that timed out raises
    redis-py's ``TimeoutError`` and the write counted once or not at all, whatever retry the
    client was made with.

    ``purchase_wait`` (seconds, default 2.0) bounds how long :meth:`decrfloor` and :meth:`add`
    ask a holder again while it answers :class:`~redis_ctr.errors.BudgetInFlight` (0: raise it
    at once).
    """

    def __init__(
        self,
        client: SyncClient,
        *,
        spread_refresh_ms: Optional[int] = DEFAULT_REFRESH_MS,
        purchase_wait: float = DEFAULT_PURCHASE_WAIT,
        unspread_refresh_ms: int = UNSPREAD_REFRESH_MS,
    ) -> None:
        self.client = sync_client(client, "Ctr")
        self._holders = holder_cache(spread_refresh_ms, self.client, unspread_refresh_ms)
        self.purchase_wait = checked_wait(purchase_wait)

    def pipeline(self, transaction: bool = True) -> CtrPipeline:
        """A :class:`redis_ctr.CtrPipeline` on a new pipeline of this client (``MULTI``/``EXEC``
        when ``transaction``): its methods queue, ``execute()`` returns the typed replies."""
        from .pipeline import CtrPipeline

        return CtrPipeline(self.client.pipeline(transaction=transaction))

    @overload
    def holders(self, key: str, *, at: Optional[int] = None) -> List[str]: ...
    @overload
    def holders(self, key: bytes, *, at: Optional[int] = None) -> List[bytes]: ...
    def holders(self, key: KeyT, *, at: Optional[int] = None) -> List[Any]:
        """The holders the adds of ``key`` go to, the home key first (``[key]`` when it is not
        spread), in the type of ``key`` (str or bytes), from the cache or, when that is older
        than ``spread_refresh_ms``, from ``CTR.HOLDERS`` (one read at a time per key).

        With ``at`` (unix ms): ``CTR.HOLDERS key AT at``, read now, the holders in force at that
        time, the list a purchase of that time walks (folded ones included, later ones not);
        :class:`~redis_ctr.errors.HoldersAhead` when ``at`` is ahead of the home's clock,
        :class:`~redis_ctr.errors.HoldersUnknown` when the home keeps no record of it."""
        if at is not None:
            return names_like(key, holders_of(run(self.client, _calls.holders(key, at)), key))
        return names_like(key, self._route_holders(key))

    def _route_holders(self, key: KeyT) -> Holders:
        """The holders adds of ``key`` go to, as the cache keeps them."""
        cache = self._holders
        if cache is None:
            return (key,)
        known = cache.fresh(key)
        if known is not None:
            return known
        with cache.refresh_lock(key):
            # Threads that found it stale together: the first reads, the others use that.
            known = cache.fresh(key)
            if known is not None:
                return known
            try:
                return cache.learned(key, run(self.client, _calls.holders(key)))
            except UseHomeKey:
                return cache.learned(key, None)  # a holder's name: written as it is
            except (ResponseError, ConnectionError, TimeoutError, HolderMoving, ClusterError):
                return cache.learned(key, None, failed=True)

    def _purchase_list(self, key: KeyT, at: Optional[int]) -> PurchaseList:
        """The ``AT`` a tokened purchase of ``key`` sends (the caller's ``at``) and the holders
        it walks: without ``at``, the current ones (as cached for adds); with it, those in force
        at ``at``, ``CTR.HOLDERS key AT at`` read for this purchase (not cached: a retry
        elsewhere reads the same list), asked again while the home's clock is behind ``at``
        (:class:`AheadWait`). A home with no list for that time (:data:`UNLISTED`): the
        current holders."""
        if at is None:
            return None, self._route_holders(key)
        wait = AheadWait(at, self.purchase_wait)
        while True:
            try:
                return at, holders_of(run(self.client, _calls.holders(key, at)), key)
            except HoldersAhead as e:
                time.sleep(wait.after(e))
            except HoldersUnreplicated as e:
                time.sleep(wait.within(UNREPLICATED_PAUSE, e))
            except UNLISTED:
                return at, self._route_holders(key)

    def _holders_after_fold(self, key: KeyT) -> Holders:
        """The holders of ``key`` read again (not from the cache): a write met one of them
        folded back into the home, so the cached list is out of date."""
        if self._holders is not None:
            self._holders.forget(key)
        return self._route_holders(key)

    @overload
    def add(
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
    def add(
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
    def add(
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
        """``CTR.ADD``: adds ``delta`` and returns the new value (an ``int``).

        ``token`` makes a retry count once (inside ``ctr.token-window-ms``); ``at`` is the
        event's time (unix ms). ``ex``/``px`` (a TTL in s/ms) and ``exat``/``pxat`` (an
        expiry at a unix time in s/ms) are set only when this call creates the key, or with
        ``enx=True`` also on an existing key that has no TTL (one it has is never changed);
        ``persist=True`` removes the key's TTL. At most one of ``ex``, ``px``, ``exat``,
        ``pxat`` and ``persist``, and ``enx`` only with one of the four times: another
        combination raises ``ValueError`` before anything is sent.
        A negative delta that the counter's floor refuses (nothing changed) raises
        :class:`~redis_ctr.errors.FloorRefused` (a ``BelowFloor``), a positive one its ceiling
        refuses :class:`~redis_ctr.errors.CeilingRefused` (an ``AboveCeiling``); with
        ``refusable=True`` it returns None instead (the return type is then ``Optional[int]``).

        On a spread counter the add goes to one holder (see the class) and the reply is that
        holder's value, not the total: read the total with :meth:`get`. A retry of a tokened
        add through this client reaches the holder its first send went to.

        On a spread counter with a ceiling (a positive delta) or a floor (a negative one) each
        holder has a share of the room: a holder whose share is used up refuses (nil) while
        others may still have some. The add then walks on over the other holders in the order
        :func:`redis_ctr.probe_order` gives for its token (a random one without a token), one
        ``CTR.ADD`` each, until one applies it; it is refused (``CeilingRefused`` or
        ``FloorRefused``, None with ``refusable=True``) only when every holder refused. Each
        holder replays its first answer to a token, so a retry of a tokened add, from any
        process with the same holder list, walks the same holders in the same order and counts
        at most once. A holder whose room is in flight (``TRYAGAIN budget in flight``) is asked
        again for up to ``purchase_wait`` seconds, then :class:`~redis_ctr.errors.BudgetInFlight`
        is raised (an ``AddAwaitsFold`` for a tokened add); it is never skipped. An add that
        sets a TTL goes to the home key alone and is not walked.
        """
        # TypeError (not an int) or ValueError (options the module refuses) here, before any I/O
        call = _calls.add(key, delta, token, at, ex, px, exat, pxat, persist, enx)
        value = self._add(
            key, call, token, _calls.changes_ttl(ex, px, exat, pxat, persist, enx)
        )
        if value is None and not refusable:
            raise refused(key, delta)
        return value

    def _add(
        self, key: KeyT, call: Call[Optional[int]], token: Optional[KeyT], with_ttl: bool
    ) -> Optional[int]:
        cache = self._holders
        # An add that sets or removes a TTL (ex/px/exat/pxat, enx, persist) goes home: a TTL
        # set on a holder would expire it alone. So does an untokened add of a key whose
        # holders were never read, until it is added to often (HolderCache.cold): a counter
        # that is not spread costs one command per add.
        if cache is None or with_ttl:
            return run(self.client, call)
        if token is None and cache.cold(key):
            route = AddRoute(cache, key, None, None, self.purchase_wait)
        else:
            route = AddRoute(cache, key, token, self._route_holders(key), self.purchase_wait)
        while True:
            try:
                value = run(self.client, call.on(route.target))
            except ROUTED as e:
                done = self._follow(route, route.failed(e))
            else:
                done = self._follow(route, route.replied(value))
            if done is not None:
                return done.value

    def _follow(self, route: AddRoute, step: Step) -> Optional[Done]:
        """Does what ``step`` says (:class:`~redis_ctr._add_route.AddRoute`): the add's reply
        when it is done, else None to send it (again) to ``route.target``."""
        while isinstance(step, Reread):
            step = route.reread(self._route_holders(route.key))
        if isinstance(step, Pause):
            time.sleep(step.seconds)
        return step if isinstance(step, Done) else None

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

    def ceil(self, key: KeyT, ceiling: Optional[int]) -> None:
        """``CTR.CEIL``: sets the ceiling no command can cross; None removes it.

        Raises :class:`~redis_ctr.errors.AboveCeiling` when the value is already above it."""
        run(self.client, _calls.ceil(key, ceiling))

    def increx(
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
        """``CTR.INCREX``: Redis 8.8's ``INCREX`` on a counter. Adds ``by`` unless the result
        leaves ``[lbound, ubound]`` (or the counter's floor and ceiling): then nothing changes
        and ``applied`` is 0, or with ``saturate`` the result is clamped. The expiry options
        apply as ``INCREX`` applies them. With ``token``, a retry returns the first reply."""
        call = _calls.increx(
            key, by, lbound, ubound, saturate, ex, px, exat, pxat, persist, enx, token, at
        )
        return run(self.client, call)

    def refund(self, key: KeyT, token: KeyT, *, at: Optional[int] = None) -> Optional[int]:
        """``CTR.REFUND``: gives back, once, what the tokened ``decrfloor`` (or negative
        ``add``) ``token`` took; the units returned (the same on a retry), None when the token
        has no grant in the window.

        On a spread counter the refund walks the holders the purchase ``token`` walked (the
        list this client remembers for the token, else the one in force at ``at``: pass the
        purchase's ``at``; without either, the current holders), in the token's probe order,
        until one answers a number: the holder that granted the token gives the units back
        there, where they are budget again. A holder a shrink folds back since it granted sends
        the refund after the grant's units: it is asked again while they travel home
        (:class:`~redis_ctr.errors.RefundAwaitsFold`, for up to ``purchase_wait``), then names
        the add that gives them back at the home once (:class:`~redis_ctr.errors.RefundFolded`),
        which is made here (``key`` is the home)."""
        call = _calls.refund(key, token)
        cache = self._holders
        if cache is None:
            return run(self.client, call)
        listed = cache.remembered_purchase(key, token, at) or self._purchase_list(key, at)
        for holder in cache.probe_targets(key, listed, token, at)[1]:
            units = self._refund(call.on(holder), key)
            if units is not None:
                return units
        return None

    def _refund(self, call: Call[Optional[int]], home: KeyT) -> Optional[int]:
        """One member's ``CTR.REFUND``, asked again while a fold takes the grant's units home;
        a holder folded back names the add that gives them back at the home, made here."""
        wait = BudgetWait(self.purchase_wait, call.args[1], RefundAwaitsFold)
        while True:
            try:
                return run(self.client, call)
            except RefundFolded as e:
                sent = e.sent_home()
                if sent is None:
                    raise
                run(self.client, _calls.add(home, sent[0], token=sent[1]))
                return sent[0]
            except (BudgetInFlight, HolderMoving, ClusterError) as e:
                time.sleep(wait.pause_after(e))

    def throttle(
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
        """``CTR.THROTTLE``: a GCRA limiter of ``count`` units per ``period`` seconds with bursts
        of ``max_burst + 1``; takes ``quantity`` (0 reads without taking). Returns
        :class:`~redis_ctr.Throttled`, redis-cell's ``CL.THROTTLE`` reply. With ``token``, a
        retry returns the first call's reply and takes nothing."""
        return run(self.client, _calls.throttle(key, max_burst, count, period, quantity, token, at))

    def window(self, key: KeyT, window_ms: Optional[int], *, buckets: Optional[int] = None) -> None:
        """``CTR.WINDOW``: from now on the counter's value is what was added in the last
        ``window_ms`` (exact to ``window_ms / buckets``, 10 buckets by default); None removes
        the window. Creates the counter at 0 when missing."""
        run(self.client, _calls.window(key, window_ms, buckets))

    def decrfloor(
        self,
        key: KeyT,
        amount: int,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
        replicas: int = 0,
        replicas_timeout_ms: int = DEFAULT_REPLICAS_TIMEOUT_MS,
    ) -> Optional[int]:
        """``CTR.DECRFLOOR``: takes ``amount`` (positive) only if the value stays at or above
        the floor; the new value, or None when refused. With ``token``, a retry returns the
        first outcome (value or None) again.

        On a spread counter it is a purchase by the probe rule: the holders are visited in the
        order the token gives (:func:`redis_ctr.probe_order`; a random one without a token)
        until one grants, and the reply is what that holder can still sell (its value minus its
        own floor, never below 0: not the total, see the module's COMMANDS.md); None when every
        holder refused. A holder a shrink folded back (it never grants again) counts as a
        refusal.

        With a token and ``at`` (the order's time, say, stored with the token) the walk is over
        the holders in force at ``at``, read with ``CTR.HOLDERS key AT at`` from the home's
        master (one read per purchase), and each holder is sent ``AT at``: a retry from any
        process that passes the same ``token`` and ``at`` walks the same holders in the same
        order, each replaying its first outcome, so the token is granted at most once whatever
        grows and shrinks came between. An ``at`` ahead of the home's clock is read once the
        clock has reached it (waiting up to ``purchase_wait``, then
        :class:`~redis_ctr.errors.HoldersAhead`). A home that keeps no record of that time
        (spread by an earlier module version) is walked by its current holders, with ``at`` as
        given. With a token and no ``at`` the walk is over the current holders, no ``AT`` sent:
        a retry is safe through this client only, which remembers the list (and ``at``) of its
        last 10,000 tokens; a retry from another process walks the current list, which after a
        grow may start at another holder with budget (a second grant). A retry given ``at``
        walks the remembered list only when it was used with that same ``at``.

        A holder (or the key itself) that answers :class:`~redis_ctr.errors.BudgetInFlight`
        (its budget still travelling; nothing recorded) is asked again with the same token,
        5 ms, 10 ms, ... up to 100 ms apart, for up to ``purchase_wait`` seconds after its first
        answer; then the error is raised. The walk never skips such a holder (a retry would be
        decided afresh there: a double sale).

        A durable purchase (``replicas=N``): each holder's ``CTR.DECRFLOOR`` is followed, on
        the same connection to the same master, by ``WAIT N replicas_timeout_ms``; a grant
        that fewer than ``N`` replicas of that master acknowledged in time raises
        :class:`~redis_ctr.errors.NotDurable` (the grant stands on the master; a failover
        before a replica has it may lose it). A refusal is returned as it is."""
        call = _calls.decrfloor(key, amount, token, at)  # TypeError here, before any I/O
        checked_replicas(replicas, replicas_timeout_ms)
        cache = self._holders
        if cache is None:
            return self._purchase(call, replicas, replicas_timeout_ms)
        if token is None:
            listed: PurchaseList = (at, self._route_holders(key))
        else:
            listed = cache.remembered_purchase(key, token, at) or self._purchase_list(key, at)
        sent_at, targets = cache.probe_targets(key, listed, token, at)
        call = _calls.decrfloor(key, amount, token, sent_at)
        for holder in targets:
            try:
                value = self._purchase(call.on(holder), replicas, replicas_timeout_ms)
            except HolderFolded:
                # Folded back since the list was read: nothing counted there, and it never
                # grants again (a token it did grant, it replays). The key given is a home or
                # refused as a holder's name: raised. An untokened walk read a stale list:
                # read again next time (a tokened one keeps the list of its token).
                if holder == key:
                    raise
                if token is None:
                    cache.forget(key)
                continue
            if value is not None:
                return value
        return None

    def _purchase(
        self, call: Call[Optional[int]], replicas: int, timeout_ms: int
    ) -> Optional[int]:
        """One holder's ``CTR.DECRFLOOR`` (with its ``WAIT`` when durable), asked again while
        its budget is in flight."""
        wait = BudgetWait(self.purchase_wait, call.args[1])
        while True:
            try:
                if replicas:
                    return run_durable(self.client, call, replicas, timeout_ms)
                return run(self.client, call)
            except (BudgetInFlight, HolderMoving, ClusterError) as e:
                time.sleep(wait.pause_after(e))

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

    def reconcile_start(self, key: KeyT) -> int:
        """``CTR.RECONCILE key START``: the counter keeps time buckets from now on (created at
        0 when missing); returns the earliest watermark a reconcile ``AT`` accepts."""
        return run(self.client, _calls.reconcile_start(key))

    @overload
    def spread(self, key: str, holders: int) -> List[str]: ...
    @overload
    def spread(self, key: bytes, holders: int) -> List[bytes]: ...
    def spread(self, key: KeyT, holders: int) -> List[Any]:
        """``CTR.SPREAD key holders``: makes ``key`` the home of a spread counter of ``holders``
        holders (fewer than it has folds the others back into the home) and returns every
        holder's name, the home first, in the type of ``key`` (as :meth:`holders`). This
        client's adds go over them from the next one on."""
        names = run(self.client, _calls.spread(key, holders))
        if self._holders is not None:
            self._holders.learned(key, names_like(key, tuple(names)))
        return names

    def info(self, key: KeyT) -> Optional[CounterInfo]:
        """``CTR.INFO`` as a dict (str keys), or None when the key is missing. On a spread
        counter: ``value`` is the total, ``holders`` the names, ``holder_values`` and
        ``holder_ages_ms`` each holder's value and its age."""
        return run(self.client, _calls.info(key))


class Pnc:
    """``PNC.*`` commands (PN-counter CRDT) on a redis-py client."""

    def __init__(self, client: SyncClient) -> None:
        self.client = sync_client(client, "Pnc")

    def pipeline(self, transaction: bool = True) -> CtrPipeline:
        """A :class:`redis_ctr.CtrPipeline` (its ``pnc_*`` methods) on a new pipeline of this
        client; see :meth:`Ctr.pipeline`."""
        from .pipeline import CtrPipeline

        return CtrPipeline(self.client.pipeline(transaction=transaction))

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

    def floor(self, key: KeyT, floor: Optional[int]) -> None:
        """``PNC.FLOOR``: sets or moves the floor of the sum over every deployment (None:
        removes it); raises :class:`redis_ctr.CtrError` when the value seen here is below it or
        a raise needs more rights than this deployment holds."""
        return run(self.client, _calls.pnc_floor(key, floor))

    def decrfloor(
        self, key: KeyT, amount: int, *, token: Optional[KeyT] = None
    ) -> Optional[int]:
        """``PNC.DECRFLOOR``: the new value, or None when this deployment's rights do not cover
        ``amount``; a ``token`` retry replays the first outcome."""
        return run(self.client, _calls.pnc_decrfloor(key, amount, token))

    def give(self, key: KeyT, to_replica: KeyT, amount: int) -> Optional[int]:
        """``PNC.GIVE``: moves rights to the deployment ``to_replica``; the rights left here, or
        None when they do not cover ``amount``."""
        return run(self.client, _calls.pnc_give(key, to_replica, amount))
