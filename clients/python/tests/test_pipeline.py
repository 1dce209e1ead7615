"""Pipelines and MULTI/EXEC: the module's commands queued on redis-py pipelines (sync and
asyncio, Redis and RedisCluster), execute() returning the typed replies and the module's error
classes, nothing read before (no CTR.HOLDERS or CTR.INFO sent by the library)."""

from __future__ import annotations

import unittest
from typing import Any, Dict

import redis
import redis.asyncio
from redis.cluster import RedisCluster

import redis_ctr
from redis_ctr import CounterOverflow, Ctr, CtrPipeline, FloorRefused, Pnc
from redis_ctr.asyncio import AsyncCtr, AsyncCtrPipeline

from .servers import CLUSTER_PORT, PORT, fresh


def calls(client: Any, *names: str) -> Dict[str, int]:
    """Calls of the given commands so far, from INFO commandstats."""
    stats = client.info("commandstats")
    return {n: int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in names}


class PipelineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT)
        self.addCleanup(self.r.close)

    def test_a_transaction_queues_and_returns_typed_replies(self) -> None:
        tag = fresh("{pipe") + "}"
        views, stock, likes = tag + ":views", tag + ":stock", tag + ":likes"
        ctr = Ctr(self.r)
        before = calls(self.r, "exec", "ctr.holders", "ctr.info")
        pipe = ctr.pipeline()  # MULTI/EXEC
        returned = pipe.add(views, 2).add(views, 3, token="t1").add(views, 3, token="t1")
        self.assertIs(returned, pipe)
        pipe.get(views).mget(views, tag + ":none")
        pipe.add(stock, 5).floor(stock, 0).decrfloor(stock, 4, token="o1")
        pipe.decrfloor(stock, 4, token="o2").add(stock, -4, refusable=True).info(stock)
        pipe.pnc_add(likes, 7).pnc_get(likes)
        pipe.pnc_floor(likes, 0).pnc_decrfloor(likes, 2, token="p1").pnc_give(likes, "eu", 9)
        self.assertEqual(len(pipe), 16)
        results = pipe.execute()
        self.assertEqual(results[:5], [2, 5, 5, 5, [5, 0]])
        self.assertEqual(results[5:10], [5, None, 1, None, None])
        info = results[10]
        self.assertEqual((info["value"], info["floor"]), (1, 0))
        self.assertEqual(results[11:], [7, 7, None, 5, None])
        after = calls(self.r, "exec", "ctr.holders", "ctr.info")
        self.assertEqual(after["exec"] - before["exec"], 1, "one MULTI/EXEC")
        self.assertEqual(after["ctr.holders"], before["ctr.holders"], "no holder read")
        self.assertEqual(after["ctr.info"] - before["ctr.info"], 1, "only the queued CTR.INFO")
        self.assertEqual(len(pipe), 0, "execute empties the pipeline")

    def test_adds_to_a_spread_counter_send_nothing_but_the_adds(self) -> None:
        key = fresh("pipe-spread")
        Ctr(self.r).spread(key, 4)
        ctr = Ctr(self.r)  # a cold holder cache: a plain add would read CTR.HOLDERS
        before = calls(self.r, "ctr.holders", "ctr.info", "ctr.add")
        with ctr.pipeline(transaction=False) as pipe:
            for _ in range(10):
                pipe.add(key, 1)
            self.assertEqual(pipe.execute(), list(range(1, 11)))  # all on the home key
        after = calls(self.r, "ctr.holders", "ctr.info", "ctr.add")
        self.assertEqual(after["ctr.holders"], before["ctr.holders"])
        self.assertEqual(after["ctr.info"], before["ctr.info"])
        self.assertEqual(after["ctr.add"] - before["ctr.add"], 10)
        self.assertEqual(ctr.get(key), 10)

    def test_module_errors_come_as_their_classes(self) -> None:
        tag = fresh("{perr") + "}"
        big, stock = tag + ":big", tag + ":stock"
        ctr = Ctr(self.r)
        ctr.add(big, 2**63 - 1)
        ctr.add(stock, 1)
        ctr.floor(stock, 0)
        pipe = ctr.pipeline()
        pipe.add(big, 1).get(big).add(stock, -5)
        with self.assertRaises(CounterOverflow):
            pipe.execute()
        self.assertEqual(len(pipe), 0)
        pipe.add(big, 1).get(big).add(stock, -5)
        results = pipe.execute(raise_on_error=False)
        self.assertIsInstance(results[0], CounterOverflow)
        self.assertEqual(results[1], 2**63 - 1)
        self.assertIsInstance(results[2], FloorRefused)
        self.assertIsInstance(results[2], redis_ctr.BelowFloor)

    def test_native_commands_on_the_same_pipeline_keep_their_replies(self) -> None:
        key = fresh("mixed")
        raw = self.r.pipeline(transaction=False)
        pipe = CtrPipeline(raw)
        raw.set(key + ":s", "x")
        pipe.add(key, 4)
        raw.get(key + ":s")
        pipe.get(key)
        raw.incr(key)  # a counter is not a string: the server's error, in its place
        results = pipe.execute(raise_on_error=False)
        self.assertEqual(results[:4], [True, 4, b"x", 4])
        self.assertIsInstance(results[4], redis.ResponseError)
        self.assertNotIsInstance(results[4], redis_ctr.CtrError, "not a module command")
        pipe.add(key, 1)
        raw.incr(key)
        with self.assertRaises(redis.ResponseError):
            pipe.execute()
        self.assertEqual(Ctr(self.r).get(key), 5, "every command ran")

    def test_a_client_class_on_a_pipeline_is_refused_at_once(self) -> None:
        pipe = self.r.pipeline()
        for make in (Ctr, Pnc, redis_ctr.CoalescingWriter):
            with self.assertRaises(TypeError) as raised:
                make(pipe)
            self.assertIn("CtrPipeline", str(raised.exception))
            self.assertLess(len(str(raised.exception)), 400)
        self.assertEqual(len(pipe), 0, "nothing queued (no CTR.HOLDERS, no CTR.INFO)")
        with self.assertRaises(TypeError):
            CtrPipeline(self.r)

    def test_watch_then_multi(self) -> None:
        key = fresh("watched")
        ctr = Ctr(self.r)
        ctr.add(key, 1)
        pipe = ctr.pipeline()
        pipe.pipeline.watch(key)
        with self.assertRaises(TypeError):
            pipe.add(key, 1)  # between WATCH and MULTI redis-py runs commands at once
        self.assertEqual(ctr.get(key), 1)
        pipe.pipeline.multi()
        pipe.add(key, 1).get(key)
        self.assertEqual(pipe.execute(), [2, 2])
        pipe.pipeline.watch(key)
        ctr.add(key, 1)  # another client's write: the transaction does not run
        pipe.pipeline.multi()
        pipe.add(key, 100)
        with self.assertRaises(redis.WatchError):
            pipe.execute()
        self.assertEqual(ctr.get(key), 3)


class ClusterPipelineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(self.rc.close)

    def test_a_cluster_pipeline_over_many_slots(self) -> None:
        ctr = Ctr(self.rc)
        keys = [fresh(f"cp{i}") for i in range(12)]
        pipe = ctr.pipeline(transaction=False)
        for i, key in enumerate(keys):
            pipe.add(key, i + 1)
        for key in keys:
            pipe.get(key)
        self.assertEqual(pipe.execute(), [*range(1, 13), *range(1, 13)])

    def test_a_transaction_in_one_slot(self) -> None:
        tag = fresh("{ct") + "}"
        pipe = Ctr(self.rc).pipeline(transaction=True)
        pipe.add(tag + ":a", 1).add(tag + ":b", 2).mget(tag + ":a", tag + ":b")
        self.assertEqual(pipe.execute(), [1, 2, [1, 2]])


class AsyncPipelineTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_pipelines(self) -> None:
        # redis-py 8.1's asyncio RedisCluster cannot close after a transaction pipeline ran
        # (RuntimeError: Event loop is closed, without this library): no MULTI/EXEC there.
        for client, transaction in (
            (redis.asyncio.Redis(port=PORT, protocol=3), True),
            (redis.asyncio.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT), False),
        ):
            tag = fresh("{ap") + "}"
            ctr = AsyncCtr(client)
            pipe = ctr.pipeline(transaction=transaction)
            self.assertIsInstance(pipe, AsyncCtrPipeline)
            pipe.add(tag + ":a", 2).add(tag + ":a", 3).get(tag + ":a").info(tag + ":a")
            results = await pipe.execute()
            self.assertEqual(results[:3], [2, 5, 5])
            self.assertEqual(results[3]["value"], 5)
            big = tag + ":big"
            await ctr.add(big, 2**63 - 1)
            pipe.add(big, 1)
            with self.assertRaises(CounterOverflow):
                await pipe.execute()
            with self.assertRaises(TypeError):
                AsyncCtr(client.pipeline())  # type: ignore[arg-type]
            await client.aclose()


if __name__ == "__main__":
    unittest.main()
