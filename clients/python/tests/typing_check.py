"""Checked by mypy --strict (make lint), never run: what the library's types promise. Each
``# type: ignore[...]`` below marks a misuse mypy must report; --strict warns about an ignore
that is not needed, so a promise that breaks fails the check."""

from __future__ import annotations

from typing import Any, List, Optional

import redis
import redis.asyncio
from redis.cluster import RedisCluster

import redis_ctr
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr


def sync_usage(r: redis.Redis, rc: RedisCluster) -> None:
    ctr = redis_ctr.Ctr(r)
    redis_ctr.Ctr(rc)
    plain: int = ctr.add("k", 1)  # a plain add is an int: no None check
    tokened: int = ctr.add("k", 1, token="t", at=1, ex=60)
    repaired: int = ctr.add("k", 1, exat=1_900_000_000, enx=True)
    ctr.add("k", 1, pxat=1_900_000_000_000, persist=False, enx=True)
    kept: Optional[int] = ctr.add("k", 1, persist=True, refusable=True)
    ctr.add("k", 1, persist="yes")  # type: ignore[call-overload]
    ctr.add("k", 1, exat=1.5)  # type: ignore[call-overload]
    maybe: Optional[int] = ctr.add("k", -1, refusable=True)
    not_int: int = ctr.add("k", -1, refusable=True)  # type: ignore[assignment]
    names: List[str] = ctr.spread("k", 4)
    same: List[str] = ctr.holders("k")
    raw: List[bytes] = ctr.spread(b"k", 4)
    raw_again: List[bytes] = ctr.holders(b"k")
    mixed: List[str] = ctr.holders(b"k")  # type: ignore[assignment]
    then: List[bytes] = ctr.holders(b"k", at=1_900_000_000_000)
    bought: Optional[int] = ctr.decrfloor("k", 1, token="t", at=1_900_000_000_000)
    replies: List[Any] = ctr.pipeline().add("k", 1).get("k").execute()
    redis_ctr.CtrPipeline(r.pipeline()).add("k", 1).add("k", 1, px=60_000, enx=True)
    with redis_ctr.CoalescingWriter(r) as writer:
        writer.add("k")
    print(plain, tokened, repaired, kept, maybe, not_int, names, same, raw, raw_again, mixed)
    print(then, bought, replies)


def wrong_kind(ar: redis.asyncio.Redis) -> None:
    redis_ctr.Ctr(ar)  # type: ignore[arg-type]
    redis_ctr.CoalescingWriter(ar)  # type: ignore[arg-type]


async def async_usage(ar: redis.asyncio.Redis, r: redis.Redis) -> None:
    ctr = AsyncCtr(ar)
    plain: int = await ctr.add("k", 1)
    maybe: Optional[int] = await ctr.add("k", -1, refusable=True)
    expiring: int = await ctr.add("k", 1, pxat=1_900_000_000_000, enx=True)
    await ctr.add("k", 1, persist=True)
    names: List[str] = await ctr.holders("k", at=1_900_000_000_000)
    raw: List[bytes] = await ctr.spread(b"k", 2)
    replies: List[Any] = await ctr.pipeline().add("k", 1).execute()
    async with AsyncCoalescingWriter(ar) as writer:
        await writer.add("k")
    AsyncCtr(r)  # type: ignore[arg-type]
    print(plain, maybe, expiring, names, raw, replies)
