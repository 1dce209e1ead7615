"""Holder lists from CTR.HOLDERS: one read per key for a stampede of adds on a cold cache (sync
threads and asyncio tasks), a non-cluster client on the home's master that never raises
MovedError on a spread counter, and redis-py's cluster give-up during a slot move raised as
HolderMoving."""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import Any, Dict, Tuple

import redis
import redis.asyncio
from redis.cluster import RedisCluster

import redis_ctr
import redis_ctr.asyncio
from redis_ctr.asyncio import AsyncCtr

from ._typed import command, keyslot, node_of, primaries
from .servers import CLUSTER_PORT, PORT, fresh


def calls(client: Any) -> Dict[str, int]:
    """Calls of CTR.HOLDERS and CTR.INFO so far, from INFO commandstats."""
    stats = client.info("commandstats")
    return {
        name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("ctr.holders", "ctr.info")
    }


def add_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_ctr.add", {}).get("calls", 0))


class UnspreadCostTest(unittest.TestCase):
    """A counter that is not spread costs one command per untokened add: its holders are read
    only once this client adds to it often (and then trusted for long while it stays unspread);
    a spread one is still written over its holders."""

    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT)
        self.addCleanup(self.r.close)

    def test_2000_adds_over_1000_keys_never_spread_send_2000_commands(self) -> None:
        keys = [fresh("unspread") for _ in range(1000)]
        ctr = redis_ctr.Ctr(self.r)
        before, adds_before = calls(self.r), add_calls(self.r)
        for key in keys * 2:
            ctr.add(key, 1)
        self.assertEqual(calls(self.r)["ctr.holders"], before["ctr.holders"])
        self.assertEqual(add_calls(self.r) - adds_before, 2000)

    def test_a_hot_unspread_key_reads_its_holders_once(self) -> None:
        key = fresh("hot-unspread")
        ctr = redis_ctr.Ctr(self.r, spread_refresh_ms=1)
        before = calls(self.r)
        for _ in range(200):
            ctr.add(key, 1)
        self.assertEqual(calls(self.r)["ctr.holders"] - before["ctr.holders"], 1)

    def test_a_key_spread_elsewhere_is_written_over_its_holders(self) -> None:
        key = fresh("spread-elsewhere")
        redis_ctr.Ctr(self.r).spread(key, 4)
        ctr = redis_ctr.Ctr(self.r)
        for _ in range(200):
            ctr.add(key, 1)
        info = redis_ctr.Ctr(self.r).info(key)
        assert info is not None
        self.assertEqual(info["value"], 200)
        self.assertGreater(sum(1 for v in info["holder_values"][1:] if v), 1)


class StampedeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT)
        self.addCleanup(self.r.close)

    def test_200_async_adds_on_a_cold_cache_read_the_holders_once(self) -> None:
        key = fresh("stampede")
        redis_ctr.Ctr(self.r).spread(key, 4)
        before = calls(self.r)

        async def main() -> None:
            client = redis.asyncio.Redis(port=PORT, max_connections=1000)
            ctr = AsyncCtr(client)
            await asyncio.gather(*(ctr.add(key, 1) for _ in range(200)))
            await client.aclose()

        asyncio.run(main())
        after = calls(self.r)
        self.assertEqual(after["ctr.holders"] - before["ctr.holders"], 1)
        self.assertEqual(after["ctr.info"], before["ctr.info"])
        self.assertEqual(redis_ctr.Ctr(self.r).get(key), 200)

    def test_50_threads_on_a_cold_cache_read_the_holders_once(self) -> None:
        key = fresh("stampede-sync")
        redis_ctr.Ctr(self.r).spread(key, 4)
        ctr = redis_ctr.Ctr(redis.Redis(port=PORT, max_connections=100))
        before = calls(self.r)
        start = threading.Barrier(50)

        def one() -> None:
            start.wait()
            ctr.add(key, 1)

        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = calls(self.r)
        self.assertEqual(after["ctr.holders"] - before["ctr.holders"], 1)
        self.assertEqual(after["ctr.info"], before["ctr.info"])
        self.assertEqual(redis_ctr.Ctr(self.r).get(key), 50)

    def test_a_holders_name_is_written_as_it_is(self) -> None:
        ctr = redis_ctr.Ctr(self.r)
        key = fresh("home")
        holder = ctr.spread(key, 2)[1]
        self.assertEqual(ctr.holders(holder), [holder])
        self.assertEqual(ctr.add(holder, 3), 3)
        self.assertEqual(ctr.get(key), 3)


@unittest.skipUnless(CLUSTER_PORT, "no cluster")
class ClusterHoldersTest(unittest.TestCase):
    def setUp(self) -> None:
        self.rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(self.rc.close)

    def home_master(self, key: str) -> Tuple[redis.Redis, int]:
        node = node_of(self.rc, key)
        direct = redis.Redis(host=node.host, port=node.port)
        self.addCleanup(direct.close)
        return direct, node.port

    def test_a_non_cluster_client_on_the_home_master_never_raises_moved(self) -> None:
        key = fresh("plain-client")
        holders = redis_ctr.Ctr(self.rc).spread(key, 16)
        direct, port = self.home_master(key)
        ports = {node_of(self.rc, h).port for h in holders}
        self.assertGreater(len(ports - {port}), 0, "holders on other masters")
        ctr = redis_ctr.Ctr(direct)
        for i in range(50):
            ctr.add(key, 1)
            ctr.add(key, 2, token=f"t{i}")
            ctr.add(key, 2, token=f"t{i}")  # a retry: counted once
        self.assertEqual(redis_ctr.Ctr(self.rc).get(key), 150)
        with redis_ctr.CoalescingWriter(direct) as writer:
            for _ in range(300):
                writer.add(key)
                writer.flush()
        self.assertEqual(writer.stats.dropped, 0)
        self.assertEqual(redis_ctr.Ctr(self.rc).get(key), 450)

    def test_an_asyncio_non_cluster_client_on_the_home_master_never_raises_moved(self) -> None:
        key = fresh("plain-async")
        redis_ctr.Ctr(self.rc).spread(key, 16)
        port = node_of(self.rc, key).port

        async def main() -> int:
            direct = redis.asyncio.Redis(port=port)
            ctr = AsyncCtr(direct)
            for i in range(50):
                await ctr.add(key, 1)
                await ctr.add(key, 2, token=f"t{i}")
                await ctr.add(key, 2, token=f"t{i}")
            async with redis_ctr.asyncio.AsyncCoalescingWriter(direct) as writer:
                for _ in range(100):
                    await writer.add(key)
                    await writer.flush()
            await direct.aclose()
            return writer.stats.dropped

        self.assertEqual(asyncio.run(main()), 0)
        self.assertEqual(redis_ctr.Ctr(self.rc).get(key), 250)

    def test_cluster_give_up_during_a_slot_move_is_holder_moving(self) -> None:
        key = fresh("moving")
        ctr = redis_ctr.Ctr(self.rc)
        holders = ctr.spread(key, 6)
        # On the home key itself: a holder key left on the migrating slot's source would still
        # be served there (only a missing one is "moving"), which made this test flaky.
        command(self.rc, "CTR.ADD", key, 1)
        home_port = node_of(self.rc, key).port
        holder = next(h for h in holders[1:] if node_of(self.rc, h).port != home_port)
        src = node_of(self.rc, holder)
        dst = next(n for n in primaries(self.rc) if n.port != src.port)
        slot = keyslot(self.rc, holder)
        src_conn = redis.Redis(host=src.host, port=src.port, decode_responses=True)
        dst_conn = redis.Redis(host=dst.host, port=dst.port, decode_responses=True)
        self.addCleanup(src_conn.close)
        self.addCleanup(dst_conn.close)
        src_id, dst_id = command(src_conn, "CLUSTER MYID"), command(dst_conn, "CLUSTER MYID")
        command(dst_conn, "CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        command(src_conn, "CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        try:
            with self.assertRaises(redis_ctr.HolderMoving) as raised:
                ctr.get(key)
            self.assertIsInstance(raised.exception.__cause__, redis.exceptions.ClusterError)
            self.assertIsInstance(raised.exception, redis.exceptions.TryAgainError)
        finally:
            command(src_conn, "CLUSTER SETSLOT", slot, "STABLE")
            command(dst_conn, "CLUSTER SETSLOT", slot, "STABLE")
        self.assertEqual(ctr.get(key), 1)


if __name__ == "__main__":
    unittest.main()
