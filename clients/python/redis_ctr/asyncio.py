"""redis-ctr on redis-py's asyncio clients (``redis.asyncio.Redis``, ``RedisCluster``): the
asyncio twins of :class:`redis_ctr.Ctr`, :class:`redis_ctr.Pnc`,
:class:`redis_ctr.CoalescingWriter` and :class:`redis_ctr.CtrPipeline`, with the same methods,
arguments and normalised replies, awaited.

>>> from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr
"""

from ._async_client import AsyncClient, AsyncCtr, AsyncPnc
from .pipeline import AsyncCtrPipeline
from .writer import AsyncCoalescingWriter

__all__ = ["AsyncClient", "AsyncCoalescingWriter", "AsyncCtr", "AsyncCtrPipeline", "AsyncPnc"]
