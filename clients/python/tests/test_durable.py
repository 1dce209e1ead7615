"""A durable purchase (``decrfloor(..., replicas=N)``): the grant is acknowledged by N replicas
of the granting master before it returns (``WAIT`` on the purchase's own connection), or
``NotDurable`` says how many had it. Against the one server, which has a replica
(REDIS_REPLICA_PORT)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import unittest
from typing import Any

import redis
import redis.asyncio

import redis_ctr
from redis_ctr.asyncio import AsyncCtr

from ._typed import command
from .servers import CLUSTER_PORT, PORT, fresh

REPLICA_PORT = int(os.environ.get("REDIS_REPLICA_PORT", "0"))


def stock(r: Any, units: int) -> str:
    key = fresh("durable")
    ctr = redis_ctr.Ctr(r)
    ctr.add(key, units)
    ctr.floor(key, 0)
    return key


@unittest.skipUnless(REPLICA_PORT, "no replica")
class DurablePurchaseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT)
        self.replica = redis.Redis(port=REPLICA_PORT)
        self.addCleanup(self.r.close)
        self.addCleanup(self.replica.close)

    def test_the_replica_holds_the_grant_when_it_returns(self) -> None:
        key = stock(self.r, 5)
        for n in range(1, 4):
            value = redis_ctr.Ctr(self.r).decrfloor(key, 1, token=f"t{n}", replicas=1)
            self.assertEqual(value, 5 - n)
            # Read at once on the replica: WAIT returned, so it has applied the grant.
            self.assertEqual(redis_ctr.Ctr(self.replica).get(key), 5 - n)

    def test_more_replicas_than_acknowledge_raise_not_durable(self) -> None:
        key = stock(self.r, 5)
        ctr = redis_ctr.Ctr(self.r)
        with self.assertRaises(redis_ctr.NotDurable) as raised:
            ctr.decrfloor(key, 2, token="t", replicas=2, replicas_timeout_ms=100)
        self.assertEqual((raised.exception.value, raised.exception.acknowledged), (3, 1))
        # The grant stands: a retry with its token replays it.
        self.assertEqual(ctr.decrfloor(key, 2, token="t"), 3)

    def test_a_stalled_replica_makes_it_not_durable(self) -> None:
        key = stock(self.r, 5)
        stall = threading.Thread(
            target=lambda: command(redis.Redis(port=REPLICA_PORT), "DEBUG", "SLEEP", 0.5)
        )
        stall.start()
        time.sleep(0.05)
        with self.assertRaises(redis_ctr.NotDurable) as raised:
            redis_ctr.Ctr(self.r).decrfloor(key, 1, replicas=1, replicas_timeout_ms=100)
        self.assertEqual(raised.exception.acknowledged, 0)
        stall.join()

    def test_a_refusal_is_returned(self) -> None:
        key = stock(self.r, 1)
        self.assertIsNone(redis_ctr.Ctr(self.r).decrfloor(key, 2, token="t", replicas=1))

    def test_a_spread_counter(self) -> None:
        key = stock(self.r, 0)
        ctr = redis_ctr.Ctr(self.r)
        ctr.floor(key, None)
        ctr.add(key, 9)
        ctr.floor(key, 0)
        ctr.spread(key, 3)
        sold = 0
        for n in range(9):
            if ctr.decrfloor(key, 1, token=f"s{n}", replicas=1) is not None:
                sold += 1
        self.assertEqual(redis_ctr.Ctr(self.replica).get(key), 9 - sold)

    def test_asyncio(self) -> None:
        key = stock(self.r, 5)

        async def scenario() -> None:
            client = redis.asyncio.Redis(port=PORT)
            ctr = AsyncCtr(client)
            self.assertEqual(await ctr.decrfloor(key, 1, token="a", replicas=1), 4)
            self.assertEqual(redis_ctr.Ctr(self.replica).get(key), 4)
            with self.assertRaises(redis_ctr.NotDurable):
                await ctr.decrfloor(key, 1, token="b", replicas=2, replicas_timeout_ms=100)
            await client.aclose()

        asyncio.run(scenario())


@unittest.skipUnless(CLUSTER_PORT, "no cluster")
class ClusterDurablePurchaseTest(unittest.TestCase):
    def test_without_replicas_the_grant_is_not_durable(self) -> None:
        from redis.cluster import RedisCluster

        r = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(r.close)
        key = stock(r, 5)
        ctr = redis_ctr.Ctr(r)
        with self.assertRaises(redis_ctr.NotDurable) as raised:
            ctr.decrfloor(key, 1, token="c", replicas=1, replicas_timeout_ms=50)
        self.assertEqual((raised.exception.value, raised.exception.acknowledged), (4, 0))
        self.assertEqual(ctr.get(key), 4)


if __name__ == "__main__":
    unittest.main()
