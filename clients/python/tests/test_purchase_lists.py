"""Tokened purchases given ``at`` walk the holders in force at that time (``CTR.HOLDERS key AT
at``, each holder sent ``AT at``): a retry with the same token and ``at`` through another,
fresh client after a grow or a shrink replays the first answer and the stock is taken once
(issue 34, item 5: before, another client walked the current list, and after a grow its first
holder could be another one with budget, a second grant). Also: without ``at`` the current list,
no ``AT``, remembered for a retry through the same client; what a client remembers per token and
when a retry walks it; the holders folded back passed as refusals; an ``at`` ahead of the home
waited for; and the fallback for a home that keeps no record of its lists."""

from __future__ import annotations

import time
import unittest
from typing import Any, Callable, List, cast

import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_ctr import (
    Ctr,
    HoldersAhead,
    HoldersUnreplicated,
    NotPrimary,
    SpreadRefused,
    probe_order,
)
from redis_ctr._spread import HolderCache
from redis_ctr.asyncio import AsyncCtr
from redis_ctr.errors import error_class

from ._typed import node_of
from .servers import CLUSTER_PORT, PORT, fresh
from .test_writer import client


def server_ms(r: Any) -> int:
    """The server's clock (``TIME``), unix ms."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def settled_ms(r: Any) -> int:
    """A time of the server's clock past every grow and shrink made so far, and not ahead of
    the module's clock: a change is dated a millisecond past the module's (coarse) clock, which
    may lag ``TIME`` by a few milliseconds."""
    time.sleep(0.02)
    at = server_ms(r)
    time.sleep(0.02)
    return at


def token_moved_by_grow(start: int = 0) -> str:
    """A token whose walk over 5 holders starts at another of the first 3 than its walk over 3:
    after a grow from 3 to 5 (which keeps the first 3 names), a walk over the current list
    would ask that holder first, and it has budget: a second grant. Its walk over 3 starts at
    a holder, not the home, so that after a shrink to 1 a holder folded back replays it."""
    return next(
        t
        for t in (f"order-{i}" for i in range(start, start + 1000))
        if probe_order(t, 5)[0] < 3 and probe_order(t, 5)[0] != probe_order(t, 3)[0] != 0
    )


def token_first_at_a_holder(n: int, start: int = 0) -> str:
    """A token whose walk over ``n`` holders starts at a holder, not the home."""
    return next(t for t in (f"buy-{i}" for i in range(start, start + 1000)) if probe_order(t, n)[0])


def respread(spread: Callable[[], List[str]]) -> List[str]:
    """``spread()``, asked again while a budget move or transfer is still unacknowledged
    (across masters they travel in the background)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return spread()
        except SpreadRefused:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def check_retries_after_a_grow_and_a_shrink(
    test: unittest.TestCase, r: Any, clock: Any, client: Callable[[], Any]
) -> None:
    """A purchase through one client at ``at``; a grow to 5, and a retry of the same token and
    ``at`` through a fresh client replays it; a shrink to 1, and another fresh client's retry
    replays it too (from a holder folded back). The stock is taken once. ``clock``: a client
    of the home's master (its ``TIME``); ``client()`` makes a new client."""
    key = fresh("{times}stock")
    admin = Ctr(r)
    admin.add(key, 300)
    admin.floor(key, 0)
    three = admin.spread(key, 3)
    at = settled_ms(clock)
    test.assertEqual(Ctr(client()).holders(key, at=at), three)
    token = token_moved_by_grow()
    first = Ctr(client()).decrfloor(key, 7, token=token, at=at)
    test.assertIsNotNone(first)
    test.assertEqual(admin.get(key), 293)
    five = respread(lambda: admin.spread(key, 5))
    test.assertEqual(five[:3], three)
    test.assertEqual(Ctr(client()).holders(key, at=at), three, "the list at its time")
    test.assertEqual(Ctr(client()).decrfloor(key, 7, token=token, at=at), first, "after the grow")
    test.assertEqual(admin.get(key), 293, "taken once after the grow")
    respread(lambda: admin.spread(key, 1))
    test.assertEqual(Ctr(client()).holders(key, at=at), three, "folded ones stay listed")
    test.assertEqual(Ctr(client()).decrfloor(key, 7, token=token, at=at), first, "after the shrink")
    test.assertEqual(admin.get(key), 293, "taken once after the shrink")
    # A new token at the same time whose walk starts at a holder folded back since: that
    # holder refuses it as folded (nothing counted, it never grants again), the walk goes on
    # and the home grants it.
    other = token_first_at_a_holder(3)
    test.assertIsNotNone(Ctr(client()).decrfloor(key, 1, token=other, at=at))
    test.assertEqual(admin.get(key), 292)


class PurchaseListTest(unittest.TestCase):
    def test_a_retry_through_another_client_after_a_grow_or_a_shrink_is_granted_once(self) -> None:
        r = client()
        check_retries_after_a_grow_and_a_shrink(self, r, r, client)

    @unittest.skipUnless(CLUSTER_PORT, "no cluster")
    def test_a_retry_through_another_client_after_a_grow_or_a_shrink_on_the_cluster(self) -> None:
        def cluster() -> RedisCluster:
            rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, decode_responses=True)
            self.addCleanup(rc.close)
            return rc

        rc = cluster()
        node = node_of(rc, "{times}stock")
        home = redis.Redis(host=node.host, port=node.port)
        self.addCleanup(home.close)
        check_retries_after_a_grow_and_a_shrink(self, rc, home, cluster)

    def test_without_at_the_current_list_is_walked_and_remembered(self) -> None:
        """Without ``at``: the current holders, no ``AT`` sent (remembered with None), and a
        retry through the same client after a grow walks that list again."""
        key, r = fresh("remembered"), client()
        ctr = Ctr(r, spread_refresh_ms=60_000)
        ctr.add(key, 300)
        ctr.floor(key, 0)
        three = ctr.spread(key, 3)
        token = token_moved_by_grow(2000)
        first = ctr.decrfloor(key, 7, token=token)
        self.assertIsNotNone(first)
        assert ctr._holders is not None
        self.assertEqual(ctr._holders.remembered_purchase(key, token, None), (None, tuple(three)))
        respread(lambda: Ctr(r).spread(key, 5))
        ctr._holders.forget(key)  # the grow seen by this client: its current list is five
        self.assertEqual(ctr.decrfloor(key, 7, token=token), first)
        self.assertEqual(ctr.get(key), 293)

    def test_an_at_ahead_of_the_home_is_read_once_the_home_reaches_it(self) -> None:
        key, r = fresh("future"), client()
        Ctr(r).add(key, 10)
        Ctr(r).floor(key, 0)
        Ctr(r).spread(key, 2)
        soon = server_ms(r) + 300
        started = time.monotonic()
        self.assertEqual(Ctr(r).decrfloor(key, 1, token="soon", at=soon) is not None, True)
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        with self.assertRaises(HoldersAhead) as caught:
            Ctr(r, purchase_wait=0).decrfloor(key, 1, token="later", at=server_ms(r) + 5000)
        self.assertIsNotNone(caught.exception.now)
        self.assertEqual(Ctr(r).get(key), 9)

    def test_only_purchases_given_at_read_the_list_at_a_time(self) -> None:
        """Without ``at`` no ``CTR.HOLDERS`` beyond the holder cache's; with it, one read of
        the home per purchase (a retry elsewhere must read the same list, so it is not
        cached)."""
        key, r = fresh("cost"), client()
        ctr = Ctr(r, spread_refresh_ms=60_000)
        ctr.add(key, 100)
        ctr.floor(key, 0)
        ctr.spread(key, 4)
        at = settled_ms(r)

        def reads() -> int:
            stats = r.info("commandstats").get("cmdstat_ctr.holders", {"calls": 0})
            return int(stats["calls"])

        before = reads()
        for n in range(20):
            ctr.decrfloor(key, 1, token=f"c{n}")
        self.assertEqual(reads() - before, 0, "the cached holders")
        for n in range(20):
            ctr.decrfloor(key, 1, token=f"d{n}", at=at)
        self.assertEqual(reads() - before, 20, "one list read per purchase given at")
        self.assertEqual(ctr.get(key), 60)

    def test_a_home_without_a_record_of_its_lists_is_walked_by_its_current_list(self) -> None:
        """A home spread by an earlier module version (or a module before ``AT``): the current
        holders, the caller's ``at``, as before."""
        key, r = fresh("unknown"), client()
        Ctr(r).add(key, 20)
        Ctr(r).floor(key, 0)
        holders = Ctr(r).spread(key, 2)
        at = settled_ms(r)
        for text in (
            "the holder list at that time is not known: the counter was spread by an earlier "
            "version (known from its next grow or shrink on)",
            "wrong number of arguments for 'ctr.holders' command",
        ):
            old = OldHome(port=PORT, decode_responses=True, text=text)
            self.addCleanup(old.close)
            ctr = Ctr(old)
            token = f"old-{len(text)}"
            self.assertIsNotNone(ctr.decrfloor(key, 1, token=token, at=at))
            remembered = ctr._holders.remembered_purchase(key, token, at) if ctr._holders else None
            self.assertEqual(remembered, (at, tuple(holders)))
            self.assertIsNotNone(ctr.decrfloor(key, 1, token=token, at=at))
        self.assertEqual(Ctr(r).get(key), 18)

    def test_a_replica_refusing_the_list_at_a_time_is_not_primary(self) -> None:
        text = (
            "ERR CTR.HOLDERS AT is answered by the home's master only (a replica may not hold "
            "its latest grow or shrink yet)"
        )
        self.assertIs(error_class(text), NotPrimary)
        self.assertIs(error_class(text[4:]), NotPrimary)

    def test_a_list_the_replicas_do_not_hold_yet_is_asked_again_within_the_wait(self) -> None:
        text = (
            "TRYAGAIN the replicas of the home's master do not hold its latest holder list "
            "change yet (a failover could lose it): retry CTR.HOLDERS AT"
        )
        self.assertIs(error_class(text), HoldersUnreplicated)
        asked: List[Any] = []

        class Home:
            """The home's master: its replicas hold the grow from the second ask on."""

            def execute_command(self, *args: Any, **options: Any) -> Any:
                asked.append(args)
                if len(asked) == 1:
                    raise ResponseError(text)
                return [b"k", b"{ctr.1.1.0}k"]

        ctr = Ctr(Home(), purchase_wait=1.0)  # type: ignore[arg-type]
        self.assertEqual(ctr._purchase_list("k", 5_000), (5_000, ("k", "{ctr.1.1.0}k")))
        self.assertEqual(asked, [("CTR.HOLDERS", "k", "AT", 5_000)] * 2)
        asked.clear()
        with self.assertRaises(HoldersUnreplicated):
            Ctr(Home(), purchase_wait=0.0)._purchase_list("k", 5_000)  # type: ignore[arg-type]


class RememberedPurchaseTest(unittest.TestCase):
    """What a client remembers per purchase token (no server): the list and ``AT`` of its
    first send, walked again by a retry without ``at`` or with that same ``at``; another
    ``at`` is another purchase time, walked over its own list, remembered from then on."""

    def test_a_token_keeps_its_first_list_and_at(self) -> None:
        cache = HolderCache(60_000)
        three, five = ("k", "a", "b"), ("k", "a", "b", "c", "d")
        self.assertIsNone(cache.remembered_purchase("k", "t", None))
        at, walked = cache.probe_targets("k", (1_000, three), "t", 1_000)
        self.assertEqual((at, sorted(walked)), (1_000, sorted(three)))
        self.assertEqual(cache.remembered_purchase("k", "t", None), (1_000, three))
        self.assertEqual(cache.remembered_purchase("k", "t", 1_000), (1_000, three))
        self.assertIsNone(cache.remembered_purchase("k", "t", 2_000))
        # A thread that read a list of its own for the same token and at: the first one wins.
        self.assertEqual(cache.probe_targets("k", (1_000, five), "t", 1_000)[1], walked)
        # A retry without at: the remembered list and its AT.
        self.assertEqual(cache.probe_targets("k", (None, five), "t", None), (1_000, walked))
        # Another at: its own list, remembered from then on.
        at, walked = cache.probe_targets("k", (2_000, five), "t", 2_000)
        self.assertEqual((at, len(walked)), (2_000, 5))
        self.assertEqual(cache.remembered_purchase("k", "t", None), (2_000, five))
        # Without at first: remembered with None, and a retry given at reads its own list.
        cache.probe_targets("k", (None, three), "u", None)
        self.assertEqual(cache.remembered_purchase("k", "u", None), (None, three))
        self.assertIsNone(cache.remembered_purchase("k", "u", 1_000))


class OldHome(redis.Redis):
    """A client whose ``CTR.HOLDERS key AT`` is answered with ``text`` (a home that keeps no
    record of its lists, or a module from before ``AT``)."""

    def __init__(self, *, text: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text = text

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "CTR.HOLDERS" and len(args) > 2:
            raise ResponseError(self.text)
        return cast(Any, super()).execute_command(*args, **options)


class AsyncPurchaseListTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_retries_after_a_grow_and_a_shrink_are_granted_once(self) -> None:
        r = redis.asyncio.Redis(port=PORT, protocol=3)
        self.addAsyncCleanup(r.aclose)
        sync = client()
        key = fresh("async-times")
        admin = AsyncCtr(r)
        await admin.add(key, 300)
        await admin.floor(key, 0)
        three = await admin.spread(key, 3)
        at = settled_ms(sync)
        token = token_moved_by_grow(4000)
        first = await AsyncCtr(r).decrfloor(key, 7, token=token, at=at)
        self.assertIsNotNone(first)
        self.assertEqual((await admin.spread(key, 5))[:3], three)
        self.assertEqual(await AsyncCtr(r).holders(key, at=at), three)
        self.assertEqual(await AsyncCtr(r).decrfloor(key, 7, token=token, at=at), first)
        await admin.spread(key, 1)
        self.assertEqual(await AsyncCtr(r).decrfloor(key, 7, token=token, at=at), first)
        self.assertEqual(await admin.get(key), 293)
        other = token_first_at_a_holder(3, 4000)
        self.assertIsNotNone(await AsyncCtr(r).decrfloor(key, 1, token=other, at=at))
        self.assertEqual(await admin.get(key), 292)

    async def test_async_without_at_walks_and_remembers_the_current_list(self) -> None:
        r = redis.asyncio.Redis(port=PORT)
        self.addAsyncCleanup(r.aclose)
        key = fresh("async-current")
        ctr = AsyncCtr(r, spread_refresh_ms=60_000)
        await ctr.add(key, 300)
        await ctr.floor(key, 0)
        three = await ctr.spread(key, 3)
        token = token_moved_by_grow(6000)
        first = await ctr.decrfloor(key, 7, token=token)
        self.assertIsNotNone(first)
        assert ctr._holders is not None
        remembered = ctr._holders.remembered_purchase(key, token, None)
        self.assertEqual(remembered, (None, tuple(three)))
        await AsyncCtr(r).spread(key, 5)
        ctr._holders.forget(key)  # the grow seen by this client
        self.assertEqual(await ctr.decrfloor(key, 7, token=token), first)
        self.assertEqual(await ctr.get(key), 293)


if __name__ == "__main__":
    unittest.main()
