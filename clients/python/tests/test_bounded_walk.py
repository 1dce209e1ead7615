"""Adds of a spread counter with a ceiling or a floor walk on when one member refuses: each
member (the home and every holder) has a share of the room, so an add that a full member
refuses (nil) goes on to the others, the token's holder first and then the rest in the order
of the probe rule, and is refused only when every member refused. A retry of a tokened add,
through the same client or another, replays each member's answer (a refusal is recorded under
the token) and counts once. A member whose room is in flight (``TRYAGAIN budget in flight``,
injected here by a proxy) is asked again, never passed. A counter that is not spread, or an add
a member applied, costs what it cost before. Also the coalescing writers' sums, and a folded
holder met on the walk."""

from __future__ import annotations

import time
import unittest
from typing import Any, Dict, List, Tuple

import redis
import redis.asyncio

from redis_ctr import (
    BudgetInFlight,
    CeilingRefused,
    CoalescingWriter,
    Ctr,
    FloorRefused,
    HolderAway,
    probe_order,
)
from redis_ctr._spread import AddWalk, HolderCache
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr

from .proxy import TryAgainProxy, bulk
from .servers import PORT, fresh
from .test_writer import client

MEMBERS = 4
"""Every counter here is spread over the home and three holders."""


def ceiled(r: Any, name: str, ceiling: int = 100) -> Tuple[str, List[str]]:
    """A counter at 0 with ``ceiling``, spread to :data:`MEMBERS`: each member holds a quarter
    of the room."""
    key = fresh(name)
    plain = Ctr(r, spread_refresh_ms=None)
    plain.add(key, 0)
    plain.ceil(key, ceiling)
    return key, plain.spread(key, MEMBERS)


def floored(r: Any, name: str, value: int = 100) -> Tuple[str, List[str]]:
    """A counter at ``value`` with the floor 0, spread to :data:`MEMBERS`."""
    key = fresh(name)
    plain = Ctr(r, spread_refresh_ms=None)
    plain.add(key, value)
    plain.floor(key, 0)
    return key, plain.spread(key, MEMBERS)


def values(r: Any, key: str) -> List[int]:
    """Each member's value, the home first."""
    info = Ctr(r, spread_refresh_ms=None).info(key)
    assert info is not None
    return info["holder_values"]


def fill(r: Any, member: str, delta: int) -> None:
    """Adds ``delta`` at ``member`` itself (no routing), e.g. to use up its share."""
    assert Ctr(r, spread_refresh_ms=None).add(member, delta, refusable=True) is not None


def calls(r: Any) -> Dict[str, int]:
    """``CTR.*`` calls the server has run so far, by command."""
    stats = r.info("commandstats")
    return {n: s["calls"] for n, s in stats.items() if n.startswith("cmdstat_ctr")}


def sent(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {n: c - before.get(n, 0) for n, c in after.items() if c - before.get(n, 0)}


def members_alone(test: unittest.TestCase, r: Any) -> None:
    """Turns the server's rebalancer off for ``test`` (restored after it): each member's
    refusal is then final, so what the walk alone does shows (with it on, the server also
    gathers room to a member whose add it refuses, and the add waits for it)."""
    before = r.config_get("ctr.rebalance-delay-ms")["ctr.rebalance-delay-ms"]
    r.config_set("ctr.rebalance-delay-ms", 0)
    test.addCleanup(lambda: client().config_set("ctr.rebalance-delay-ms", before))


def token_where(first: int, second: int, start: int = 0) -> str:
    """A token whose walk over the members starts at member ``first``, then ``second``."""
    for i in range(start, start + 10_000):
        token = f"walk-{i}"
        order = probe_order(token, MEMBERS)
        if order[0] == first and order[1] == second:
            return token
    raise AssertionError("no such token")


class AddWalkRuleTest(unittest.TestCase):
    """The order of the walk, without a server."""

    holders = ("k", "h1", "h2", "h3")

    def test_a_tokened_walk_is_the_probe_order_without_the_members_visited(self) -> None:
        for i in range(40):
            token = f"t{i}"
            order = [self.holders[j] for j in probe_order(token, 4)]
            walk = AddWalk(HolderCache(60_000), self.holders, token, (order[0],), retry=False)
            self.assertEqual([walk.next() for _ in range(4)], [*order[1:], None])
            # A first target remembered from another list (not the rule's first): skipped
            # wherever it stands, the others in the same order.
            walk = AddWalk(HolderCache(60_000), self.holders, token, (order[2],), retry=False)
            self.assertEqual([walk.next() for _ in range(4)], [order[0], order[1], order[3], None])

    def test_a_tokened_walk_never_skips_a_member_out_of_reach(self) -> None:
        token = "t1"
        order = [self.holders[j] for j in probe_order(token, 4)]
        cache = HolderCache(60_000)
        cache.unreachable(order[1])
        walk = AddWalk(cache, self.holders, token, (order[0],), retry=False)
        with self.assertRaises(HolderAway):
            walk.next()

    def test_an_untokened_walk_asks_members_out_of_reach_last(self) -> None:
        cache = HolderCache(60_000)
        cache.unreachable("h2")
        for _ in range(20):
            walk = AddWalk(cache, self.holders, None, ("h1",), retry=False)
            seen = [walk.next() for _ in range(4)]
            self.assertEqual(seen[2:], ["h2", None])
            self.assertEqual(sorted(str(h) for h in seen[:2]), ["h3", "k"])
        # A member passed unreached ends the walk with its error, not a refusal.
        walk = AddWalk(cache, self.holders, None, ("h1", "k", "h3"), retry=False)
        self.assertEqual(walk.next(), "h2")
        error = redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Refused.")
        walk.unreached(error)
        with self.assertRaises(redis.ConnectionError):
            walk.next()


class BoundedWalkTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = client()
        self.addCleanup(self.r.close)
        members_alone(self, self.r)

    def test_adds_reach_the_whole_ceiling_over_the_members(self) -> None:
        """Untokened adds of 5 under a ceiling of 100 spread to 4 (25 of room each): all 20
        are applied, none refused before the total is 100, although each member refuses once
        its quarter is full; then an add of 1 is refused (None, or CeilingRefused)."""
        key, holders = ceiled(self.r, "walk-ceil")
        ctr = Ctr(self.r)
        for i in range(20):
            self.assertIsNotNone(ctr.add(key, 5, refusable=True), f"add {i} refused")
        self.assertEqual(ctr.get(key), 100)
        self.assertEqual(values(self.r, key), [25] * MEMBERS)
        self.assertIsNone(ctr.add(key, 1, refusable=True))
        with self.assertRaises(CeilingRefused):
            ctr.add(key, 1)
        self.assertEqual(ctr.get(key), 100)

    def test_negative_adds_reach_the_floor_over_the_members(self) -> None:
        """A counter at 100 with the floor 0 spread to 4: adds of -5 reach exactly 0 with no
        refusal before; then -1 is refused (None, or FloorRefused)."""
        key, _ = floored(self.r, "walk-floor")
        ctr = Ctr(self.r)
        for i in range(20):
            self.assertIsNotNone(ctr.add(key, -5, refusable=True), f"add {i} refused")
        self.assertEqual(ctr.get(key), 0)
        self.assertIsNone(ctr.add(key, -1, refusable=True))
        with self.assertRaises(FloorRefused):
            ctr.add(key, -1)
        self.assertEqual(ctr.get(key), 0)

    def test_tokened_adds_walk_the_probe_order_and_count_once(self) -> None:
        """Tokened adds of 5 fill the ceiling exactly; each retry, through this client and
        through another one, replays its outcome (applied: the member's value, never counted
        again; refused: None), also after room was freed at a member."""
        key, holders = ceiled(self.r, "walk-tokens")
        ctr = Ctr(self.r)
        tokens = [f"order-{i}" for i in range(20)]
        for token in tokens:
            self.assertIsNotNone(ctr.add(key, 5, token=token, refusable=True), token)
        self.assertEqual(ctr.get(key), 100)
        late = "order-late"
        self.assertIsNone(ctr.add(key, 5, token=late, refusable=True))
        for token in tokens:
            self.assertIsNotNone(ctr.add(key, 5, token=token, refusable=True), token)
            self.assertIsNotNone(Ctr(self.r).add(key, 5, token=token, refusable=True), token)
        self.assertEqual(ctr.get(key), 100)
        fill(self.r, holders[2], -5)  # room again at one member
        self.assertIsNone(Ctr(self.r).add(key, 5, token=late, refusable=True), "replayed refusal")
        self.assertIsNone(ctr.add(key, 5, token=late, refusable=True), "replayed refusal")
        self.assertEqual(ctr.get(key), 95)
        self.assertEqual(Ctr(self.r).add(key, 5, token="order-new", refusable=True), 25)
        self.assertEqual(ctr.get(key), 100)

    def test_the_walk_follows_the_probe_rule(self) -> None:
        """The token's holder and the next member by the probe rule are full: the add lands at
        the third of the probe order, the fourth untouched."""
        key, holders = ceiled(self.r, "walk-order")
        token = token_where(1, 3)
        order = probe_order(token, MEMBERS)
        fill(self.r, holders[order[0]], 25)
        fill(self.r, holders[order[1]], 25)
        self.assertEqual(Ctr(self.r).add(key, 5, token=token), 5)
        expected = [0] * MEMBERS
        expected[order[0]] = expected[order[1]] = 25
        expected[order[2]] = 5
        self.assertEqual(values(self.r, key), expected)

    def test_an_add_to_a_cold_key_refused_at_the_home_walks_on(self) -> None:
        """A client that never read the holders sends an untokened add to the key given (the
        home); the home's share is full: it reads the holders then and walks on."""
        key, _ = ceiled(self.r, "walk-cold")
        fill(self.r, key, 25)
        self.assertEqual(Ctr(self.r).add(key, 5), 5)
        self.assertEqual(Ctr(self.r).get(key), 30)

    def test_the_walk_costs_nothing_until_a_refusal(self) -> None:
        """Applied adds to a ceiled spread: one CTR.ADD each, nothing else. A counter that is
        not spread: a refused add is one CTR.ADD (its first refusal through a client that
        never read it adds one CTR.HOLDERS, after which it is known not spread)."""
        key, _ = ceiled(self.r, "walk-cost")
        ctr = Ctr(self.r)
        ctr.holders(key)
        before = calls(self.r)
        for _ in range(8):
            ctr.add(key, 1)
            ctr.add(key, 1, token=fresh("t"))
        self.assertEqual(sent(before, calls(self.r)), {"cmdstat_ctr.add": 16})
        plain = fresh("walk-cost-plain")
        Ctr(self.r, spread_refresh_ms=None).add(plain, 0)
        Ctr(self.r, spread_refresh_ms=None).ceil(plain, 0)
        ctr = Ctr(self.r)
        before = calls(self.r)
        for _ in range(10):
            self.assertIsNone(ctr.add(plain, 1, refusable=True))
        self.assertIsNone(ctr.add(plain, 1, token="t", refusable=True))
        self.assertEqual(
            sent(before, calls(self.r)), {"cmdstat_ctr.add": 11, "cmdstat_ctr.holders": 1}
        )

    def test_a_member_whose_room_is_in_flight_is_asked_again(self) -> None:
        """The token's holder is full; the next member answers TRYAGAIN budget in flight three
        times (a proxy answers for it): it is asked again, never passed, and takes the add.
        When it keeps answering so past purchase_wait, BudgetInFlight is raised and no later
        member took the add."""
        key, holders = ceiled(self.r, "walk-inflight")
        token = token_where(2, 1)
        order = probe_order(token, MEMBERS)
        fill(self.r, holders[order[0]], 25)
        proxy = TryAgainProxy(PORT, bulk(holders[order[1]]), 3)
        self.addCleanup(proxy.close)
        proxied = redis.Redis(port=proxy.port)
        self.addCleanup(proxied.close)
        self.assertEqual(Ctr(proxied).add(key, 5, token=token), 5)
        self.assertEqual(proxy.answered, 3)
        self.assertEqual(values(self.r, key)[order[1]], 5)
        # Past the wait: raised, nothing counted further on; the retry once it answers lands
        # at that member.
        other = token_where(2, 1, start=int(token.split("-")[1]) + 1)
        proxy.replies_left = 1000
        started = time.monotonic()
        with self.assertRaises(BudgetInFlight):
            Ctr(proxied, purchase_wait=0.2).add(key, 5, token=other)
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        self.assertEqual(Ctr(self.r).get(key), 30)
        proxy.replies_left = 0
        self.assertEqual(Ctr(proxied).add(key, 5, token=other), 10)
        self.assertEqual(values(self.r, key)[order[1]], 10)
        self.assertEqual(Ctr(self.r).get(key), 35)

    def test_an_untokened_add_waits_for_room_in_flight_too(self) -> None:
        """Three members full, the fourth answers TRYAGAIN twice: the untokened add (first sent
        wherever it is sent) reaches it and waits for it."""
        key, holders = ceiled(self.r, "walk-inflight-plain")
        for member in holders[:3]:
            fill(self.r, member, 25)
        proxy = TryAgainProxy(PORT, bulk(holders[3]), 2)
        self.addCleanup(proxy.close)
        proxied = redis.Redis(port=proxy.port)
        self.addCleanup(proxied.close)
        ctr = Ctr(proxied)
        ctr.holders(key)
        self.assertEqual(ctr.add(key, 5), 5)
        self.assertEqual(proxy.answered, 2)
        self.assertEqual(values(self.r, key), [25, 25, 25, 5])

    def test_a_folded_holder_on_the_walk_is_passed(self) -> None:
        """A client that still knows 4 members after a shrink to 2: its tokened add is refused
        by the full holder 1, meets a folded holder (HolderFolded: not counted there) and goes
        on to the home, where the folded room went. A retry through a client that knows the 2
        current members counts nothing more."""
        key, holders = ceiled(self.r, "walk-folded")
        stale = Ctr(self.r, spread_refresh_ms=60_000)
        self.assertEqual(stale.holders(key), holders)
        Ctr(self.r).spread(key, 2)
        fill(self.r, holders[1], 25)
        token = next(t for t in (f"f{i}" for i in range(1000)) if probe_order(t, MEMBERS)[:2] in ([1, 2], [1, 3]))
        self.assertEqual(stale.add(key, 5, token=token), 5)
        self.assertEqual(values(self.r, key), [5, 25])
        self.assertIsNotNone(Ctr(self.r).add(key, 5, token=token))
        self.assertEqual(Ctr(self.r).get(key), 30)
        for i in range(20):
            stale.add(key, 1)
        self.assertEqual(Ctr(self.r).get(key), 50)

    def test_writer_sums_walk_on(self) -> None:
        """Holder 1's quarter of the room used up, sums of 5 (one per flush) fill the rest of
        a ceiling of 100 over 4 members with no refusal (those whose token picks holder 1 walk
        on), then a sum of 1 is refused by every member; a floored spread likewise down to
        0."""
        for make, delta in ((ceiled, 5), (floored, -5)):
            key, holders = make(self.r, "walk-writer")
            fill(self.r, holders[1], 5 * delta)
            writer = CoalescingWriter(self.r, flush_interval_ms=60_000)
            self.addCleanup(writer.close)
            for _ in range(15):
                writer.add(key, delta)
                writer.flush()
            self.assertEqual((writer.stats.flushed_sums, writer.stats.refused), (15, 0))
            self.assertGreater(writer.stats.walked, 0)
            self.assertEqual(Ctr(self.r).get(key), 100 if delta > 0 else 0)
            writer.add(key, 1 if delta > 0 else -1)
            writer.flush()
            self.assertEqual(writer.stats.refused, 1)
            self.assertEqual(Ctr(self.r).get(key), 100 if delta > 0 else 0)


class AsyncBoundedWalkTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.r = redis.asyncio.Redis(port=PORT)
        self.plain = client()
        self.addAsyncCleanup(self.r.aclose)
        self.addCleanup(self.plain.close)
        members_alone(self, self.plain)

    async def test_async_adds_reach_the_ceiling_and_the_floor(self) -> None:
        for make, delta, end in ((ceiled, 5, 100), (floored, -5, 0)):
            key, _ = make(self.plain, "async-walk")
            ctr = AsyncCtr(self.r)
            for i in range(20):
                self.assertIsNotNone(await ctr.add(key, delta, refusable=True), f"add {i} refused")
            self.assertEqual(await ctr.get(key), end)
            self.assertIsNone(await ctr.add(key, delta // 5, refusable=True))
            with self.assertRaises(CeilingRefused if delta > 0 else FloorRefused):
                await ctr.add(key, delta // 5)

    async def test_async_tokened_adds_count_once(self) -> None:
        key, _ = ceiled(self.plain, "async-walk-tokens")
        ctr = AsyncCtr(self.r)
        tokens = [f"order-{i}" for i in range(20)]
        for token in tokens:
            self.assertIsNotNone(await ctr.add(key, 5, token=token, refusable=True), token)
        self.assertIsNone(await ctr.add(key, 5, token="late", refusable=True))
        for token in tokens:
            self.assertIsNotNone(await AsyncCtr(self.r).add(key, 5, token=token, refusable=True))
        self.assertIsNone(await AsyncCtr(self.r).add(key, 5, token="late", refusable=True))
        self.assertEqual(await ctr.get(key), 100)

    async def test_async_the_walk_follows_the_probe_rule_and_waits_for_room_in_flight(self) -> None:
        key, holders = ceiled(self.plain, "async-walk-inflight")
        token = token_where(0, 3)
        order = probe_order(token, MEMBERS)
        fill(self.plain, holders[order[0]], 25)
        fill(self.plain, holders[order[1]], 25)
        proxy = TryAgainProxy(PORT, bulk(holders[order[2]]), 3)
        self.addCleanup(proxy.close)
        proxied = redis.asyncio.Redis(port=proxy.port)
        self.addAsyncCleanup(proxied.aclose)
        self.assertEqual(await AsyncCtr(proxied).add(key, 5, token=token), 5)
        self.assertEqual(proxy.answered, 3)
        expected = [0] * MEMBERS
        expected[order[0]] = expected[order[1]] = 25
        expected[order[2]] = 5
        self.assertEqual(values(self.plain, key), expected)
        proxy.replies_left = 1000
        with self.assertRaises(BudgetInFlight):
            await AsyncCtr(proxied, purchase_wait=0.2).add(key, 5, token=token_where(0, 3, 5000))
        self.assertEqual(Ctr(self.plain).get(key), 55)

    async def test_async_writer_sums_walk_on(self) -> None:
        key, holders = ceiled(self.plain, "async-walk-writer")
        fill(self.plain, holders[1], 25)
        writer = AsyncCoalescingWriter(self.r, flush_interval_ms=60_000)
        for _ in range(15):
            await writer.add(key, 5)
            await writer.flush()
        await writer.add(key, 1)
        await writer.close()
        self.assertEqual((writer.stats.flushed_sums, writer.stats.refused), (15, 1))
        self.assertGreater(writer.stats.walked, 0)
        self.assertEqual(Ctr(self.plain).get(key), 100)


if __name__ == "__main__":
    unittest.main()
