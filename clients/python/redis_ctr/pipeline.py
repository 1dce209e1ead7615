"""``CTR.*`` and ``PNC.*`` commands queued on a redis-py pipeline (``MULTI``/``EXEC`` or not),
in the style of redis-py's own module helpers (``r.json().pipeline()``).

>>> pipe = redis_ctr.Ctr(r).pipeline()              # or CtrPipeline(r.pipeline())
>>> pipe.add("page:views", 1).add("page:views", 2).get("page:views")
>>> pipe.execute()
[1, 3, 3]

Each method queues one command on the pipeline and returns the wrapper (so calls chain);
``execute()`` sends them and returns every reply of the pipeline, in order, the module's ones
normalised as :class:`redis_ctr.Ctr` returns them (ints, None, dicts, :class:`Reconciled`)
and its errors as their :class:`~redis_ctr.errors.CtrError` classes. Native commands queued on
the same pipeline (``pipe.pipeline.set(...)``) keep redis-py's own replies.

What a pipeline does not do, because its commands are only sent at ``execute()``: nothing is
read before (no ``CTR.HOLDERS``, no ``CTR.INFO``), so every command goes to the key given. An
add to a spread counter's home counts on the home (always right); ``decrfloor`` asks that one
key (no walk of the holders by the probe rule: use :meth:`redis_ctr.Ctr.decrfloor` for
purchases on a spread counter). Likewise an add to the home of a spread counter with a ceiling
or a floor is refused (nil) once the home's own share of the room is used up, even while other
holders have room: the pipeline does not walk on (:meth:`redis_ctr.Ctr.add` does). In a
cluster, a transaction's keys share a slot.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, TypeVar

from redis.exceptions import ClusterError, ResponseError

from . import _calls
from ._calls import Call, KeyT, Source
from ._once import execute_async_pipeline_once, execute_pipeline_once
from .client import is_pipeline, refused
from .errors import classify, classify_cluster

P = TypeVar("P", bound="_Queue")


def _add_parser(key: KeyT, delta: int, refusable: bool) -> Callable[[Any], Any]:
    def parse(raw: Any) -> Any:
        value = None if raw is None else int(raw)
        if value is None and not refusable:
            return refused(key, delta)  # an error in the results, raised as redis-py raises
        return value

    return parse


class _Queue:
    """The queueing methods both pipelines share."""

    def __init__(self, pipeline: Any) -> None:
        if not is_pipeline(pipeline):
            raise TypeError(
                f"{type(self).__name__} takes a redis-py pipeline (client.pipeline()), not "
                f"{type(pipeline).__name__}"
            )
        self.pipeline = pipeline
        """The redis-py pipeline the commands are queued on."""
        self._parsers: Dict[int, Callable[[Any], Any]] = {}
        self._writes = False

    def __len__(self) -> int:
        return len(self.pipeline)

    def _queue(self: P, call: Call[Any], parse: Optional[Callable[[Any], Any]] = None) -> P:
        pipe = self.pipeline
        if getattr(pipe, "watching", False) and not getattr(pipe, "explicit_transaction", False):
            # redis-py runs commands at once between WATCH and MULTI: nothing to queue.
            raise TypeError(
                "the pipeline is watching keys and runs commands at once: call "
                "pipeline.multi() before queueing (read the watched keys with redis_ctr.Ctr)"
            )
        index = len(pipe)
        pipe.execute_command(*call.args, **call.options)
        self._parsers[index] = call.parse if parse is None else parse
        self._writes = self._writes or call.write
        return self

    def _sent(self) -> bool:
        """True when a write was queued since the last ``execute``: then the pipeline is sent
        once (:func:`redis_ctr._once.execute_pipeline_once`), not resent by redis-py's retry
        after a timeout; the flag is cleared."""
        writes, self._writes = self._writes, False
        return writes

    def _results(self, raw: List[Any], raise_on_error: bool) -> List[Any]:
        parsers, self._parsers = self._parsers, {}
        self._writes = False
        results: List[Any] = []
        for i, reply in enumerate(raw):
            parse = parsers.get(i)
            if parse is None:
                results.append(reply)
            elif isinstance(reply, ResponseError):
                results.append(classify(reply))
            elif isinstance(reply, ClusterError):
                results.append(classify_cluster(reply))
            elif isinstance(reply, Exception):
                results.append(reply)
            else:
                results.append(parse(reply))
        if raise_on_error:
            # As redis-py does: the first error, once every command has run.
            for result in results:
                if isinstance(result, Exception):
                    raise result
        return results

    def add(
        self: P,
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
    ) -> P:
        """Queues ``CTR.ADD`` on ``key`` itself; its result is the new value, or (a floor's
        refusal) a :class:`~redis_ctr.errors.FloorRefused` error, None with
        ``refusable=True``."""
        # TypeError (not an int) or ValueError (options the module refuses) here, before queueing
        call = _calls.add(key, delta, token, at, ex, px, exat, pxat, persist, enx)
        return self._queue(call, _add_parser(key, call.args[2], refusable))

    def get(self: P, key: KeyT) -> P:
        """Queues ``CTR.GET``: an int."""
        return self._queue(_calls.get(key))

    def mget(self: P, *keys: KeyT) -> P:
        """Queues ``CTR.MGET``: a list of ints."""
        return self._queue(_calls.mget(keys))

    def clear(self: P, key: KeyT, *, token: Optional[KeyT] = None) -> P:
        """Queues ``CTR.CLEAR``: the value before."""
        return self._queue(_calls.clear(key, token))

    def floor(self: P, key: KeyT, floor: Optional[int]) -> P:
        """Queues ``CTR.FLOOR``: None."""
        return self._queue(_calls.floor(key, floor))

    def ceil(self: P, key: KeyT, ceiling: Optional[int]) -> P:
        """Queues ``CTR.CEIL``: None."""
        return self._queue(_calls.ceil(key, ceiling))

    def increx(
        self: P,
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
    ) -> P:
        """Queues ``CTR.INCREX``: an :class:`~redis_ctr.Increxed`."""
        call = _calls.increx(
            key, by, lbound, ubound, saturate, ex, px, exat, pxat, persist, enx, token, at
        )
        return self._queue(call)

    def refund(self: P, key: KeyT, token: KeyT) -> P:
        """Queues ``CTR.REFUND``: the units given back, or None."""
        return self._queue(_calls.refund(key, token))

    def decrfloor(
        self: P, key: KeyT, amount: int, *, token: Optional[KeyT] = None, at: Optional[int] = None
    ) -> P:
        """Queues ``CTR.DECRFLOOR`` on ``key`` itself: the new value, or None when refused."""
        return self._queue(_calls.decrfloor(key, amount, token, at))

    def throttle(
        self: P,
        key: KeyT,
        max_burst: int,
        count: int,
        period: int,
        quantity: int = 1,
        *,
        token: Optional[KeyT] = None,
        at: Optional[int] = None,
    ) -> P:
        """Queues ``CTR.THROTTLE``: a :class:`~redis_ctr.Throttled`."""
        return self._queue(_calls.throttle(key, max_burst, count, period, quantity, token, at))

    def window(self: P, key: KeyT, window_ms: Optional[int], *, buckets: Optional[int] = None) -> P:
        """Queues ``CTR.WINDOW`` (None removes the window): None."""
        return self._queue(_calls.window(key, window_ms, buckets))

    def reconcile(self: P, key: KeyT, truth: int, *, at: Optional[int] = None) -> P:
        """Queues ``CTR.RECONCILE key truth [AT at]``: a :class:`~redis_ctr.Reconciled`."""
        return self._queue(_calls.reconcile(key, truth, at))

    def reconcile_from(
        self: P, key: KeyT, kind: Source, source: KeyT, *, at: Optional[int] = None
    ) -> P:
        """Queues ``CTR.RECONCILE key FROM kind source [AT at]``."""
        return self._queue(_calls.reconcile_from(key, kind, source, at))

    def reconcile_start(self: P, key: KeyT) -> P:
        """Queues ``CTR.RECONCILE key START``."""
        return self._queue(_calls.reconcile_start(key))

    def spread(self: P, key: KeyT, holders: int) -> P:
        """Queues ``CTR.SPREAD``: the holder names in the type of ``key``."""
        return self._queue(_calls.spread(key, holders))

    def holders(self: P, key: KeyT, *, at: Optional[int] = None) -> P:
        """Queues ``CTR.HOLDERS`` (``AT at``: the holders in force at that time): the holder
        names in the type of ``key``."""
        call = _calls.holders(key, at)
        parse = _calls.names_parser(key)
        return self._queue(call, parse)

    def info(self: P, key: KeyT) -> P:
        """Queues ``CTR.INFO``: a dict (:class:`~redis_ctr.CounterInfo`), or None."""
        return self._queue(_calls.info(key))

    def pnc_add(self: P, key: KeyT, delta: int) -> P:
        """Queues ``PNC.ADD``: the new value."""
        return self._queue(_calls.pnc_add(key, delta))

    def pnc_get(self: P, key: KeyT) -> P:
        """Queues ``PNC.GET``."""
        return self._queue(_calls.pnc_get(key))

    def pnc_state(self: P, key: KeyT) -> P:
        """Queues ``PNC.STATE``: bytes, or None."""
        return self._queue(_calls.pnc_state(key))

    def pnc_merge(self: P, key: KeyT, state: bytes) -> P:
        """Queues ``PNC.MERGE``: the new value."""
        return self._queue(_calls.pnc_merge(key, state))

    def pnc_clear(self: P, key: KeyT) -> P:
        """Queues ``PNC.CLEAR``: the value before."""
        return self._queue(_calls.pnc_clear(key))

    def pnc_info(self: P, key: KeyT) -> P:
        """Queues ``PNC.INFO``: a dict (:class:`~redis_ctr.PncInfo`)."""
        return self._queue(_calls.pnc_info(key))

    def pnc_floor(self: P, key: KeyT, floor: Optional[int]) -> P:
        """Queues ``PNC.FLOOR``: None."""
        return self._queue(_calls.pnc_floor(key, floor))

    def pnc_decrfloor(
        self: P, key: KeyT, amount: int, *, token: Optional[KeyT] = None
    ) -> P:
        """Queues ``PNC.DECRFLOOR``: the new value, or None when refused here."""
        return self._queue(_calls.pnc_decrfloor(key, amount, token))

    def pnc_give(self: P, key: KeyT, to_replica: KeyT, amount: int) -> P:
        """Queues ``PNC.GIVE``: the rights left here, or None."""
        return self._queue(_calls.pnc_give(key, to_replica, amount))


class CtrPipeline(_Queue):
    """``CTR.*`` and ``PNC.*`` commands on a redis-py sync pipeline (``redis.Redis.pipeline()``,
    ``RedisCluster.pipeline()``); see the module's documentation.

    ``with`` resets the pipeline on exit, as redis-py's does."""

    def execute(self, raise_on_error: bool = True) -> List[Any]:
        """Sends the queued commands; every reply in order (the module's normalised). With
        ``raise_on_error`` (the default) the first error is raised once all have run, a module
        error as its class; otherwise errors stand in the list in their commands' places."""
        try:
            if self._sent():
                raw = execute_pipeline_once(self.pipeline, raise_on_error=False)
            else:
                raw = self.pipeline.execute(raise_on_error=False)
        except ClusterError as e:
            self._parsers = {}
            raise classify_cluster(e) from e
        except BaseException:
            self._parsers = {}
            raise
        return self._results(raw, raise_on_error)

    def reset(self) -> None:
        """Empties the pipeline (redis-py's ``reset``)."""
        self._parsers = {}
        self._writes = False
        self.pipeline.reset()

    def __enter__(self) -> CtrPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()


class AsyncCtrPipeline(_Queue):
    """The asyncio twin of :class:`CtrPipeline`, on ``redis.asyncio`` pipelines: the methods
    queue (no ``await``), ``await execute()`` sends them."""

    async def execute(self, raise_on_error: bool = True) -> List[Any]:
        """See :meth:`CtrPipeline.execute`."""
        try:
            if self._sent():
                raw = await execute_async_pipeline_once(self.pipeline, raise_on_error=False)
            else:
                raw = await self.pipeline.execute(raise_on_error=False)
        except ClusterError as e:
            self._parsers = {}
            raise classify_cluster(e) from e
        except BaseException:
            self._parsers = {}
            raise
        return self._results(raw, raise_on_error)

    async def reset(self) -> None:
        """Empties the pipeline (redis-py's ``reset``)."""
        self._parsers = {}
        self._writes = False
        done = self.pipeline.reset()
        if inspect.isawaitable(done):
            await done

    async def __aenter__(self) -> AsyncCtrPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.reset()
