"""The sync classes on a 3-master RedisCluster: each command reaches its key's master."""

from __future__ import annotations

import time
import unittest

import redis
from redis.cluster import RedisCluster

from redis_ctr import CoalescingWriter, Ctr, Pnc

from . import plain_buyer
from ._typed import node_of
from .servers import CLUSTER_PORT, fresh
from .test_commands import exercise_ctr, exercise_pnc
from .test_spread import check_budget_wait, check_spread_purchases, check_spread_writes


@unittest.skipUnless(CLUSTER_PORT, "no cluster")
class ClusterTest(unittest.TestCase):
    def setUp(self) -> None:
        # Decoded replies: the library must still return PNC.STATE as bytes.
        self.rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, decode_responses=True)

    def tearDown(self) -> None:
        self.rc.close()

    def test_every_method_on_the_cluster(self) -> None:
        exercise_ctr(self, Ctr(self.rc))
        exercise_pnc(self, Pnc(self.rc))

    def test_counters_spread_over_every_master(self) -> None:
        ctr = Ctr(self.rc)
        # Fixed names (which do land on all 3 masters), cleared first.
        keys = [f"py-spread:{i}" for i in range(30)]
        for i, key in enumerate(keys):
            ctr.clear(key)
            self.assertEqual(ctr.add(key, i), i)
        self.assertEqual(sum(ctr.get(k) for k in keys), sum(range(30)))
        ports = {node_of(self.rc, k).port for k in keys}
        self.assertEqual(len(ports), 3)
        # Each master holds its own keys: read them on the nodes themselves.
        for key in keys:
            node = node_of(self.rc, key)
            direct = redis.Redis(host=node.host, port=node.port)
            self.assertEqual(Ctr(direct).get(key), keys.index(key))

    def test_coalescing_writer_on_the_cluster(self) -> None:
        keys = [fresh(f"w{i}") for i in range(6)]
        with CoalescingWriter(self.rc, flush_every=500) as writer:
            for n in range(3000):
                writer.add(keys[n % 6])
        self.assertEqual([Ctr(self.rc).get(k) for k in keys], [500] * 6)
        self.assertLess(writer.stats.commands, 300)

    def test_a_spread_counter_on_the_cluster(self) -> None:
        key = fresh("spread")
        check_spread_writes(self, self.rc, key)
        holders = Ctr(self.rc).holders(key)
        self.assertEqual(len({node_of(self.rc, h).port for h in holders}), 3)
        with CoalescingWriter(self.rc) as writer:
            for n in range(1000):
                writer.add(key)
                if n % 20 == 19:
                    writer.flush()
        self.assertEqual(Ctr(self.rc).get(key), 1600)

    def test_purchases_on_a_spread_counter_on_the_cluster(self) -> None:
        check_spread_purchases(self, self.rc, fresh("purchase"))
        floored = fresh("floored")
        Ctr(self.rc).floor(floored, 0)
        # A floored counter spreads across masters too (its budget moves are transfers).
        self.assertEqual(len(Ctr(self.rc).spread(floored, 2)), 2)

    def test_purchases_wait_for_budget_in_flight_on_the_cluster(self) -> None:
        other = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(other.close)
        # redis-py's cluster client retries a TRYAGAIN reply itself (16 sends, pausing 50 ms
        # after each from the 9th on: about 0.4 s), then raises ClusterError("TTL exhausted."):
        # the library asks the holder again until its wait is over and raises BudgetInFlight
        # from that error. The restock lands after the first ask gave up: the second is granted.
        gave_up = check_budget_wait(self, self.rc, other, restock_after=0.6)
        self.assertIsInstance(gave_up.__cause__, redis.exceptions.ClusterError)

    def test_buying_from_a_floored_spread_counter_on_the_cluster(self) -> None:
        # Stock 20 above a floor of 10, spread over 4 holders on the masters; the shares reach
        # the holders in the background. Every purchase walks the probe rule (so none is refused
        # while any holder has a unit), and every retry replays its first answer.
        ctr = Ctr(self.rc)
        stock = fresh("stock")
        ctr.add(stock, 30)
        ctr.floor(stock, 10)
        holders = ctr.spread(stock, 4)
        self.assertEqual(len({node_of(self.rc, h).port for h in holders}), 3)
        deadline = time.monotonic() + 30
        while (info := ctr.info(stock)) is None or info["units_in_flight"] != 0:
            self.assertLess(time.monotonic(), deadline, "the shares never arrived")
            time.sleep(0.05)
        self.assertEqual(info["holder_budgets"], [5, 5, 5, 5])
        tokens = [f"order-{i}" for i in range(25)]
        first = {t: ctr.decrfloor(stock, 1, token=t) for t in tokens}
        self.assertEqual(sum(v is not None for v in first.values()), 20)
        self.assertEqual(ctr.get(stock), 10)
        for t in tokens:
            self.assertEqual(Ctr(self.rc).decrfloor(stock, 1, token=t), first[t])
        self.assertEqual(ctr.get(stock), 10)

    def test_a_plain_cluster_client_buys_a_flash_sale_without_giving_up(self) -> None:
        # Buyers on plain redis-py (their own RedisCluster, redis-py's default retries, the
        # probe rule walked by hand) start as CTR.SPREAD replies, and the shares are held on
        # the home's master for 1 s (as a slow replica would hold them): a holder waiting for
        # its share holds each purchase in the server (ctr.purchase-wait-ms, 200 ms) before
        # TRYAGAIN, so redis-py's 16 sends outlast the second and it never gives up ("TTL
        # exhausted"; with ctr.purchase-wait-ms 0, 8 of 60 purchases did). The stock sells out
        # exactly, every retry answered as first.
        home = fresh("{plain}sale")
        tally = plain_buyer.sale(CLUSTER_PORT, home, 60, 6, 4, 20, hold_shares_ms=1000)
        self.assertEqual(tally.ttl_exhausted, 0)
        self.assertEqual(tally.other_errors, [])
        self.assertEqual((tally.granted, tally.left), (60, 0))
        self.assertEqual(tally.retries_differing, 0)
        self.assertGreater(tally.retried, 0)


if __name__ == "__main__":
    unittest.main()
