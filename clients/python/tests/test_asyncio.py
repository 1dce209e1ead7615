"""The asyncio classes: every method on RESP2 and RESP3, the error classes, and the asyncio
cluster client."""

from __future__ import annotations

import time
import unittest
from typing import cast

import redis.asyncio
from redis.asyncio.cluster import RedisCluster

import redis_ctr
from redis_ctr.asyncio import AsyncCtr, AsyncPnc

from ._typed import command
from .servers import CLUSTER_PORT, PORT, fresh
from .test_commands import BAD_EXPIRY_OPTIONS


async def exercise(test: unittest.TestCase, ctr: AsyncCtr, pnc: AsyncPnc, tag: str) -> None:
    views, stock, log = f"{{{tag}}}:views", fresh("stock"), f"{{{tag}}}:log"
    test.assertEqual(await ctr.add(views, 41, px=60_000), 41)
    test.assertEqual(await ctr.add(views, 1, token="t1"), 42)
    test.assertEqual(await ctr.add(views, 1, token="t1"), 42)
    test.assertEqual(await ctr.get(views), 42)
    test.assertEqual(await ctr.mget(views, f"{{{tag}}}:none"), [42, 0])
    await ctr.add(stock, 3)
    await ctr.floor(stock, 1)
    test.assertEqual(await ctr.decrfloor(stock, 2, token="o"), 1)
    test.assertIsNone(await ctr.decrfloor(stock, 1))
    info = await ctr.info(stock)
    assert info is not None
    test.assertEqual((info["value"], info["floor"], info["budgets"]), (1, 1, [0]))
    test.assertEqual(await ctr.clear(views), 42)
    test.assertEqual(await ctr.reconcile(views, 7), (7, -7))
    await ctr.client.execute_command("XADD", log, "*", "n", "1")
    test.assertEqual(await ctr.reconcile_from(f"{{{tag}}}:c", "STREAM", log), (1, -1))
    with test.assertRaises(redis_ctr.BelowFloor):
        await ctr.floor(stock, 5)
    with test.assertRaises(redis_ctr.InvalidAmount):
        await ctr.decrfloor(stock, -1)
    limiter = f"{{{tag}}}:limiter"
    first = await ctr.throttle(limiter, 1, 1, 60, token="r1")
    test.assertEqual((first.limited, first.limit, first.remaining), (False, 2, 1))
    test.assertEqual(await ctr.throttle(limiter, 1, 1, 60, token="r1"), first)
    window = f"{{{tag}}}:window"
    await ctr.window(window, 60_000, buckets=6)
    test.assertEqual(await ctr.add(window, 2), 2)
    info = await ctr.info(window)
    assert info is not None
    test.assertEqual((info["window_ms"], info["window_buckets"]), (60_000, 6))
    await ctr.window(window, None)

    likes = fresh("likes")
    test.assertEqual(await pnc.add(likes, 5), 5)
    test.assertEqual(await pnc.get(likes), 5)
    state = await pnc.state(likes)
    assert state is not None
    test.assertEqual(await pnc.merge(fresh("copy"), state), 5)
    test.assertEqual((await pnc.info(likes))["replicas"][0]["p"], 5)
    test.assertEqual(await pnc.clear(likes), 5)
    stock = fresh("stock")
    await pnc.add(stock, 4)
    test.assertIsNone(cast(object, await pnc.floor(stock, 0)))  # cast: None as a value, for mypy
    test.assertEqual(await pnc.decrfloor(stock, 1, token="t"), 3)
    test.assertEqual(await pnc.decrfloor(stock, 1, token="t"), 3)
    test.assertEqual(await pnc.give(stock, "elsewhere", 3), 0)
    test.assertIsNone(await pnc.decrfloor(stock, 1))
    test.assertEqual((await pnc.info(stock))["rights"], 0)
    with test.assertRaises(redis_ctr.InvalidState):
        await pnc.merge(likes, b"")


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def test_every_method_on_both_protocols(self) -> None:
        for protocol in (2, 3):
            with self.subTest(protocol=protocol):
                r = redis.asyncio.Redis(port=PORT, protocol=protocol)
                await exercise(self, AsyncCtr(r), AsyncPnc(r), fresh("a"))
                await r.aclose()

    async def test_add_takes_every_expiry_option(self) -> None:
        r = redis.asyncio.Redis(port=PORT)
        self.addAsyncCleanup(r.aclose)
        ctr, key = AsyncCtr(r), fresh("async-expiry")
        at_ms = int(time.time() * 1000) + 200_789
        self.assertEqual(await ctr.add(key, 1), 1)
        self.assertEqual(await ctr.add(key, 1, pxat=at_ms, enx=True), 2)  # no TTL yet: set
        self.assertEqual(int(await command(r, "PEXPIRETIME", key)), at_ms)
        self.assertEqual(await ctr.add(key, 1, ex=5, enx=True), 3)  # has one: kept
        self.assertEqual(int(await command(r, "PEXPIRETIME", key)), at_ms)
        self.assertEqual(await ctr.add(key, 1, persist=True), 4)
        self.assertEqual(await r.pttl(key), -1)
        other = fresh("async-exat")
        self.assertEqual(await ctr.add(other, 1, exat=at_ms // 1000), 1)
        self.assertEqual(int(await command(r, "PEXPIRETIME", other)), at_ms // 1000 * 1000)
        bad = fresh("async-bad")
        for options in BAD_EXPIRY_OPTIONS:
            with self.assertRaises(ValueError, msg=repr(options)):
                await ctr.add(bad, 1, **options)
        self.assertEqual(await r.exists(bad), 0)

    @unittest.skipUnless(CLUSTER_PORT, "no cluster")
    async def test_every_method_on_the_cluster(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        await exercise(self, AsyncCtr(rc), AsyncPnc(rc), fresh("ac"))
        await rc.aclose()


if __name__ == "__main__":
    unittest.main()
