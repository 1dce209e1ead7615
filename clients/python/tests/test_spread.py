"""Spread counters from the library: adds over every holder, tokened adds on their holder and
counted once, the writer's sums counted once under lost replies, a spread learned after the
refresh bound, the exact total, the spread errors, purchases waiting for budget in flight,
``CTR.RECONCILE key START``."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

import redis
import redis.asyncio

from redis_ctr import (
    BudgetInFlight,
    HolderAway,
    HolderFolded,
    CoalescingWriter,
    Ctr,
    HolderError,
    RefundFolded,
    SpreadRefused,
    probe_order,
)
from redis_ctr.errors import classify
from redis_ctr._spread import ELSEWHERE_MS, HolderCache, holder_for_token, holders_of, token_hash
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr

from ._typed import command
from .proxy import ReplyDroppingProxy
from .servers import BUCKET_MS, CLUSTER_PORT, PORT, fresh, info_stat
from .test_writer import client


def holder_values(ctr: Ctr, key: str) -> List[int]:
    info = ctr.info(key)
    assert info is not None
    return info["holder_values"]


def tokens_per_holder(r: Any, holders: List[str]) -> Dict[str, int]:
    """How many tokens each holder remembers (each holder is an ordinary counter)."""
    plain = Ctr(r, spread_refresh_ms=None)
    return {h: (plain.info(h) or {"tokens": 0})["tokens"] for h in holders}


def check_spread_writes(test: unittest.TestCase, r: Any, key: str) -> None:
    """Untokened adds reach every holder; tokened adds, each sent twice (by two clients), go
    to the token's holder and count once; the total read on the home key is exact."""
    ctr = Ctr(r)
    holders = ctr.spread(key, 4)
    test.assertEqual(len(holders), 4)
    for _ in range(200):
        ctr.add(key, 1)
    test.assertTrue(all(v > 0 for v in holder_values(ctr, key)), holder_values(ctr, key))
    tokens = [f"order-{i}" for i in range(40)]
    for token in tokens:
        first = ctr.add(key, 10, token=token)
        self_retry = ctr.add(key, 10, token=token)
        other_process = Ctr(r).add(key, 10, token=token)
        test.assertEqual(first, self_retry)
        test.assertEqual(first, other_process)
    test.assertEqual(ctr.get(key), 200 + 400)
    expected = {h: sum(1 for t in tokens if holder_for_token(holders, t) == h) for h in holders}
    test.assertEqual(tokens_per_holder(r, holders), expected)


def check_spread_purchases(test: unittest.TestCase, r: Any, key: str) -> None:
    """Purchases by the probe rule on a spread counter with 3 units on each of 4 holders: 12
    granted out of 20, none twice; every retry (by this client and by another) replays the
    first answer, even after a restock; the first probe is the token rule's holder; every
    grant is refunded once."""
    ctr, plain = Ctr(r), Ctr(r, spread_refresh_ms=None)
    holders = ctr.spread(key, 4)
    for holder in holders:
        plain.add(holder, 3)
    tokens = [f"buy-{i}" for i in range(20)]
    first = {t: ctr.decrfloor(key, 1, token=t) for t in tokens}
    test.assertEqual(sum(v is not None for v in first.values()), 12)
    test.assertEqual(ctr.get(key), 0)
    plain.add(holders[1], 50)  # a restock: refused purchases stay refused for their token
    for t in tokens:
        test.assertEqual(ctr.decrfloor(key, 1, token=t), first[t])
        test.assertEqual(Ctr(r).decrfloor(key, 1, token=t), first[t])
    test.assertEqual(ctr.get(key), 50)
    test.assertIsNotNone(ctr.decrfloor(key, 1, token="after-restock"))
    test.assertEqual(ctr.decrfloor(key, 51), None, "more than the whole stock")
    # The first purchase found every holder stocked: it was granted by its token's holder.
    test.assertEqual(plain.decrfloor(holder_for_token(holders, "buy-0"), 1, token="buy-0"), first["buy-0"])
    # Every order cancelled: each grant comes back once, to the holder that made it, also when
    # another client (another process) retries the refund; a refusal has nothing to give back.
    for t in tokens:
        refunded = ctr.refund(key, t)
        test.assertEqual(refunded, None if first[t] is None else 1, t)
        test.assertEqual(Ctr(r).refund(key, t), refunded, t)
    test.assertEqual(ctr.get(key), 49 + 12)


def waiting_holder(r: Any) -> str:
    """A key named as holder 1 of a floored spread (odd spread id) before its first credit:
    without a floor of its own it answers BudgetInFlight to any purchase it cannot cover.
    No home lists it, so a write may not create it (a look-alike), and a counter renamed there
    would be a stray: a counter's dump made at 0 under another name of its slot is restored
    under its name (a real one is made by its home's first credit)."""
    key = "{ctr.00000000000000ab.1.0}" + fresh("sale")
    made = "made" + key  # the same hash tag, so the same slot; not a holder's name
    r.execute_command("CTR.ADD", made, 0)
    r.execute_command("RESTORE", key, 0, r.execute_command("DUMP", made))
    return key


async def waiting_holder_async(r: Any) -> str:
    """:func:`waiting_holder` through an asyncio client."""
    key = "{ctr.00000000000000ab.1.0}" + fresh("sale")
    made = "made" + key
    await r.execute_command("CTR.ADD", made, 0)
    await r.execute_command("RESTORE", key, 0, await r.execute_command("DUMP", made))
    return key


def check_budget_wait(
    test: unittest.TestCase,
    r: Any,
    other: Any,
    spread_refresh_ms: Optional[int] = 1000,
    restock_after: float = 0.1,
) -> BudgetInFlight:
    """A purchase from a holder whose budget is in flight asks it again (same token) until its
    purchase wait is over, then raises BudgetInFlight (returned); with the budget landing
    (``CTR.ADD`` by ``other`` after ``restock_after`` seconds) it is granted once."""
    key = waiting_holder(other)
    started = time.monotonic()
    with test.assertRaises(BudgetInFlight) as caught:
        Ctr(r, spread_refresh_ms=spread_refresh_ms, purchase_wait=0.2).decrfloor(key, 1, token="w1")
    test.assertGreaterEqual(time.monotonic() - started, 0.2)
    restock = threading.Timer(restock_after, Ctr(other, spread_refresh_ms=None).add, (key, 5))
    restock.start()
    bought = Ctr(r, spread_refresh_ms=spread_refresh_ms).decrfloor(key, 1, token="w1")
    restock.join()
    test.assertEqual(bought, 4, "granted once the budget landed: the first answers recorded nothing")
    return caught.exception


async def check_budget_wait_async(
    test: unittest.TestCase, r: Any, other: Any, restock_after: float = 0.1
) -> BudgetInFlight:
    """:func:`check_budget_wait` with AsyncCtr (the restock is a task: the pauses must yield)."""
    key = await waiting_holder_async(other)
    started = time.monotonic()
    with test.assertRaises(BudgetInFlight) as caught:
        await AsyncCtr(r, purchase_wait=0.2).decrfloor(key, 1, token="w1")
    test.assertGreaterEqual(time.monotonic() - started, 0.2)

    async def restock() -> None:
        await asyncio.sleep(restock_after)
        await AsyncCtr(other, spread_refresh_ms=None).add(key, 5)

    restocked = asyncio.create_task(restock())
    bought = await AsyncCtr(r).decrfloor(key, 1, token="w1")
    await restocked
    test.assertEqual(bought, 4, "granted once the budget landed: the first answers recorded nothing")
    return caught.exception


class SpreadTest(unittest.TestCase):
    def test_the_probe_order_follows_the_documented_vectors(self) -> None:
        # The same vectors as the Rust library's tests and docs/CLUSTER.md.
        self.assertEqual(
            probe_order("order-1", 16), [2, 6, 7, 8, 14, 13, 4, 1, 0, 15, 5, 12, 3, 9, 10, 11]
        )
        self.assertEqual(probe_order(b"order-1", 5), [2, 0, 4, 1, 3])
        self.assertEqual(probe_order("order-2", 5), [3, 1, 0, 2, 4])
        self.assertEqual(probe_order("t", 1), [0])
        for n in range(1, 40):
            order = probe_order(f"order-{n}", n)
            self.assertEqual(order[0], token_hash(f"order-{n}") % n)
            self.assertEqual(sorted(order), list(range(n)))

    def test_purchases_follow_the_probe_rule_and_retries_replay(self) -> None:
        check_spread_purchases(self, client(), fresh("purchase"))

    def test_a_holder_out_of_reach_never_moves_a_token(self) -> None:
        """A tokened add goes by the token rule over the whole list even when its holder is
        left out, and is refused unsent then: a retry whose first pick was forgotten (one
        token remembered here) or made in another process must reach the same holder."""
        holders = ("k", "h1", "h2", "h3")
        cache = HolderCache(refresh_ms=60_000, max_tokens=1)
        tokens = [f"t{i}" for i in range(40)]
        frozen = holder_for_token(holders, tokens[0])
        cache.timed_out(frozen)
        refused = 0
        for token in tokens * 2:
            rule = holder_for_token(holders, token)
            if rule == frozen:
                with self.assertRaises(HolderAway):
                    cache.target("k", holders, token)
                refused += 1
            else:
                self.assertEqual(cache.target("k", holders, token), rule)
        self.assertGreater(refused, 0)

    def test_a_token_skips_only_holders_its_server_does_not_serve(self) -> None:
        """A non-cluster client's tokened adds skip the holders its server answered MOVED for
        (it can never write them): the rule over the others."""
        holders = ("k", "h1", "h2", "h3")
        cache = HolderCache(refresh_ms=60_000)
        cache.unreachable("h2", ELSEWHERE_MS, moved=True)
        for i in range(40):
            token = f"m{i}"
            self.assertEqual(cache.target("k", holders, token), holder_for_token(("k", "h1", "h3"), token))

    def test_the_token_hash_is_crc16_xmodem_as_in_the_rust_library(self) -> None:
        self.assertEqual(token_hash("123456789"), 0x31C3)
        self.assertEqual(holder_for_token(["h", "a", "b"], b"123456789"), ["h", "a", "b"][0x31C3 % 3])
        # A key that is not UTF-8 cannot be spelled back from decoded names: it stays home,
        # where a UTF-8 key with the same reply spreads.
        self.assertEqual(holders_of(["\ufffd", "{ctr.1.0}\ufffd"], b"\xff"), (b"\xff",))
        self.assertEqual(holders_of(["k", "{ctr.1.0}k"], b"k"), (b"k", "{ctr.1.0}k"))

    def test_purchases_wait_for_budget_in_flight(self) -> None:
        r, other = client(), client()
        for refresh in (1000, None):  # the probe walk, and one CTR.DECRFLOOR of the key
            with self.subTest(spread_refresh_ms=refresh):
                check_budget_wait(self, r, other, refresh)
        # purchase_wait=0: the error at once.
        started = time.monotonic()
        with self.assertRaises(BudgetInFlight):
            Ctr(r, purchase_wait=0).decrfloor(waiting_holder(r), 1, token="w0")
        self.assertLess(time.monotonic() - started, 0.5)
        with self.assertRaises(ValueError):
            Ctr(r, purchase_wait=-1)

    def test_adds_spread_and_tokens_stay_on_their_holder(self) -> None:
        check_spread_writes(self, client(), fresh("spread"))

    def test_adds_that_change_the_ttl_go_to_the_home_key(self) -> None:
        """An add with an expiry option (``enx`` and ``persist`` too) is sent to the home key,
        with the holders known: a TTL on a holder would expire that holder alone."""
        key, r = fresh("spread-ttl"), client()
        ctr = Ctr(r)
        holders = ctr.spread(key, 4)
        for _ in range(100):
            ctr.add(key, 1)  # the holders are read and cached
        before = holder_values(ctr, key)
        self.assertTrue(all(v > 0 for v in before[1:]), before)
        at_ms = int(time.time() * 1000) + 300_000
        ctr.add(key, 1, pxat=at_ms, enx=True)
        self.assertEqual(int(command(r, "PEXPIRETIME", key)), at_ms)
        ctr.add(key, 1, ex=5, enx=True, token="ttl-1")  # has one: kept, even tokened
        self.assertEqual(int(command(r, "PEXPIRETIME", key)), at_ms)
        ctr.add(key, 1, persist=True, token="ttl-2")
        self.assertEqual(r.pttl(key), -1)
        ctr.add(key, 1, exat=at_ms // 1000)  # an existing key without ENX: ignored
        self.assertEqual(r.pttl(key), -1)
        after = holder_values(ctr, key)
        self.assertEqual(after[1:], before[1:], "no holder was written")
        self.assertEqual(after[0], before[0] + 4)
        self.assertEqual([r.pttl(h) for h in holders[1:]], [-1] * (len(holders) - 1))
        self.assertEqual(ctr.get(key), 104)

    def test_a_spread_is_learned_within_the_refresh_bound(self) -> None:
        key, r = fresh("learn"), client()
        ctr = Ctr(r, spread_refresh_ms=100, unspread_refresh_ms=100)
        ctr.add(key, 1, token="before")  # unspread: to the home key, remembered there
        holders = Ctr(r).spread(key, 3)  # another client spreads it
        time.sleep(0.15)
        for _ in range(61):
            ctr.add(key, 1)
        self.assertTrue(all(v > 0 for v in holder_values(ctr, key)[1:]))
        self.assertEqual(ctr.holders(key), holders)
        # A retry of the token sent before the spread goes where its first send went.
        ctr.add(key, 1, token="before")
        self.assertEqual(ctr.get(key), 62)

    def test_writer_sums_on_a_spread_counter_count_once_under_lost_replies(self) -> None:
        key, r = fresh("spread-writer"), client()
        Ctr(r).spread(key, 4)
        before = info_stat(r, "ctr_duplicates_ignored")
        proxy = ReplyDroppingProxy(PORT, b"CTR.ADD", drops=3)
        try:
            with CoalescingWriter(client(proxy.port), flush_interval_ms=60_000) as writer:
                for n in range(1000):
                    writer.add(key)
                    if n % 20 == 19:
                        writer.flush()  # 50 sums, whatever the flush thread's pace
        finally:
            proxy.close()
        self.assertEqual(Ctr(r).get(key), 1000)
        self.assertEqual((proxy.dropped, writer.stats.retries), (3, 3))
        self.assertEqual(info_stat(r, "ctr_duplicates_ignored") - before, 3)
        # 50 sums, each on its token's holder: every holder got some.
        self.assertTrue(all(v > 0 for v in holder_values(Ctr(r), key)))

    def test_a_refund_after_a_fold_goes_home_once(self) -> None:
        key, r = fresh("refund-fold"), client()
        ctr = Ctr(r)
        holders = ctr.spread(key, 3)
        ctr.add(holders[2], 5)
        self.assertEqual(ctr.decrfloor(key, 2, token="order"), 3, "granted by holder 2 alone")
        ctr.spread(key, 1)
        # Holder 2's units went home with the fold; the refund follows them there, once.
        self.assertEqual(ctr.refund(key, "order"), 2)
        self.assertEqual(ctr.refund(key, "order"), 2, "a retry replays at the home")
        self.assertEqual(ctr.get(key), 5)
        with self.assertRaises(redis.ResponseError) as raw:
            command(r, "CTR.REFUND", holders[2], "TOKEN", "order")
        folded = classify(raw.exception)
        assert isinstance(folded, RefundFolded), folded
        units, token = folded.sent_home() or (0, "")
        self.assertEqual(units, 2)
        self.assertTrue(token.startswith("ctr-refund:"), token)
        self.assertEqual(ctr.get(key), 5, "nothing changed")

    def test_spread_errors_and_reconcile_start(self) -> None:
        key, r = fresh("spread-errors"), client()
        ctr = Ctr(r)
        holders = ctr.spread(key, 3)
        self.assertEqual(ctr.spread(key, 3), holders)
        ctr.add(holders[2], 5)
        self.assertEqual(ctr.spread(key, 2), holders[:2])
        self.assertEqual(ctr.get(key), 5, "folded back into the home")
        with self.assertRaises(HolderFolded):
            ctr.add(holders[2], 1)
        # A client that still holds the old list: its untokened adds that meet the folded
        # holder re-read the holders and land on a current one.
        shrunk = fresh("shrunk")
        ctr.spread(shrunk, 3)
        stale = Ctr(r)
        self.assertEqual(len(stale.holders(shrunk)), 3)
        Ctr(r).spread(shrunk, 1)
        for _ in range(30):
            stale.add(shrunk, 1)
        self.assertEqual(ctr.get(shrunk), 30)
        self.assertEqual(stale.holders(shrunk), [shrunk], "re-read after a folded holder")
        with self.assertRaises(SpreadRefused):
            ctr.spread(key, 0)
        # On one server a floored counter spreads (across cluster masters it is refused:
        # test_cluster): its purchases follow the probe rule like any other.
        floored = fresh("floored")
        ctr.add(floored, 7)
        ctr.floor(floored, 3)
        self.assertEqual(len(ctr.spread(floored, 2)), 2)
        self.assertEqual([ctr.decrfloor(floored, 2, token=f"f{i}") for i in range(3)].count(None), 1)
        self.assertEqual(ctr.get(floored), 3)
        info = ctr.info(floored)
        assert info is not None
        self.assertEqual((info["floor"], info["headroom"], info["units_in_flight"]), (3, 0, 0))
        self.assertEqual(info["holder_budgets"], [0, 0])
        r.set(holders[1], "not a counter")
        with self.assertRaises(HolderError):
            ctr.get(key)
        earliest = ctr.reconcile_start(fresh("start"))
        self.assertEqual(earliest % BUCKET_MS, 0)
        self.assertGreaterEqual(earliest, int(time.time() * 1000) - BUCKET_MS)


class AsyncSpreadTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_adds_spread_and_reconcile_start(self) -> None:
        key = fresh("async-spread")
        r = redis.asyncio.Redis(port=PORT, protocol=3)
        ctr = AsyncCtr(r)
        holders = await ctr.spread(key, 3)
        for _ in range(90):
            await ctr.add(key, 1)
        first = await ctr.add(key, 5, token="t")
        self.assertEqual(await AsyncCtr(r).add(key, 5, token="t"), first)
        self.assertEqual(await ctr.get(key), 95)
        info = await ctr.info(key)
        assert info is not None
        self.assertEqual(info["holders"], holders)
        self.assertTrue(all(v > 0 for v in info["holder_values"]))
        async with AsyncCoalescingWriter(r) as writer:
            for n in range(200):
                await writer.add(key)
                if n % 20 == 19:
                    await writer.flush()
        self.assertEqual(await ctr.get(key), 295)
        self.assertEqual((await ctr.reconcile_start(fresh("async-start"))) % BUCKET_MS, 0)
        # Purchases: one unit, on holder 2 alone; a retry replays the first answer.
        stock = fresh("async-stock")
        stock_holders = await ctr.spread(stock, 3)
        await AsyncCtr(r, spread_refresh_ms=None).add(stock_holders[2], 1)
        self.assertEqual(await ctr.decrfloor(stock, 1, token="buy"), 0)
        self.assertEqual(await AsyncCtr(r).decrfloor(stock, 1, token="buy"), 0)
        self.assertIsNone(await ctr.decrfloor(stock, 1, token="buy-2"))
        # Refunds: the grant back at holder 2, once; a refusal has nothing to give back.
        self.assertEqual(await ctr.refund(stock, "buy"), 1)
        self.assertEqual(await AsyncCtr(r).refund(stock, "buy"), 1)
        self.assertIsNone(await ctr.refund(stock, "buy-2"))
        self.assertEqual(await ctr.get(stock), 1)
        # A refund after a fold follows the units home, once.
        self.assertEqual(await ctr.decrfloor(stock, 1, token="buy-3"), 0)
        await ctr.spread(stock, 1)
        self.assertEqual(await ctr.refund(stock, "buy-3"), 1)
        self.assertEqual(await ctr.refund(stock, "buy-3"), 1)
        self.assertEqual(await ctr.get(stock), 1)
        await r.aclose()

    async def test_async_purchases_wait_for_budget_in_flight(self) -> None:
        r, other = redis.asyncio.Redis(port=PORT, protocol=3), redis.asyncio.Redis(port=PORT)
        self.addAsyncCleanup(r.aclose)
        self.addAsyncCleanup(other.aclose)
        await check_budget_wait_async(self, r, other)

    @unittest.skipUnless(CLUSTER_PORT, "no cluster")
    async def test_async_purchases_wait_for_budget_in_flight_on_the_cluster(self) -> None:
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        other = redis.asyncio.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addAsyncCleanup(rc.aclose)
        self.addAsyncCleanup(other.aclose)
        # The restock after redis-py's own retries of the first ask (see test_cluster).
        gave_up = await check_budget_wait_async(self, rc, other, restock_after=0.6)
        self.assertIsInstance(gave_up.__cause__, redis.exceptions.ClusterError)


if __name__ == "__main__":
    unittest.main()
