"""The decisions of an add routed over a spread counter's members (:class:`AddRoute`), without
a server: the steps the sync and asyncio clients follow (a nil walks on in the probe order, a
member whose room is in flight is asked again until the wait is over, a folded holder re-reads
the holders, a timeout is raised, ``MOVED`` sends an untokened add elsewhere)."""

from __future__ import annotations

import time
import unittest
from typing import List, Optional

import redis
from redis.exceptions import ClusterError, MovedError

from redis_ctr import AddAwaitsFold, BudgetInFlight, HolderFolded, probe_order
from redis_ctr._add_route import AddRoute, Done, Pause, Reread, Send, Step
from redis_ctr._spread import HolderCache, holder_for_token

HOLDERS = ("k", "h1", "h2", "h3")
REFUSED_CONNECT = "Error 111 connecting to 127.0.0.1:1. Connection refused."


def token_at(holder: str, holders: tuple[str, ...] = HOLDERS, skip: int = 0) -> str:
    """A token whose holder (the token rule over ``holders``) is ``holder``."""
    found = [f"t{i}" for i in range(1000) if holder_for_token(holders, f"t{i}") == holder]
    return found[skip]


def untokened_at_a_holder(cache: HolderCache) -> AddRoute:
    """An untokened route whose first target is a holder, not the key given."""
    while True:
        route = AddRoute(cache, "k", None, HOLDERS, 2.0)
        if route.target != "k":
            return route


def done(test: unittest.TestCase, step: Step) -> Optional[int]:
    """The reply of a :class:`Done` step (fails the test for another step)."""
    test.assertIsInstance(step, Done)
    assert isinstance(step, Done)
    return step.value


class WalkTest(unittest.TestCase):
    def test_a_value_is_the_reply(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 2.0)
        self.assertEqual(done(self, route.replied(7)), 7)

    def test_a_nil_starts_the_walk_in_probe_order(self) -> None:
        for i in range(40):
            token = f"t{i}"
            order = [HOLDERS[j] for j in probe_order(token, len(HOLDERS))]
            route = AddRoute(HolderCache(60_000), "k", token, HOLDERS, 2.0)
            visited = [route.target]
            for _ in range(len(HOLDERS) - 1):
                self.assertIsInstance(route.replied(None), Send)
                visited.append(route.target)
            self.assertEqual(visited, order)
            # Refused by every member: the refusal.
            self.assertIsNone(done(self, route.replied(None)))

    def test_an_untokened_walk_visits_each_member_once(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", None, HOLDERS, 2.0)
        visited = [route.target]
        while isinstance(route.replied(None), Send):
            visited.append(route.target)
        self.assertEqual(sorted(visited), sorted(HOLDERS))

    def test_a_key_not_spread_is_not_walked(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", ("k",), 2.0)
        self.assertEqual(route.target, "k")
        self.assertIsNone(done(self, route.replied(None)))

    def test_a_cold_key_goes_as_it_is_and_a_nil_reads_the_holders(self) -> None:
        cache = HolderCache(60_000)
        route = AddRoute(cache, "k", None, None, 2.0)
        self.assertEqual(route.target, "k")
        self.assertIsInstance(route.replied(None), Reread)
        self.assertIsInstance(route.reread(HOLDERS), Send)
        visited = [route.target]
        while isinstance(route.replied(None), Send):
            visited.append(route.target)
        self.assertEqual(sorted(visited), ["h1", "h2", "h3"])
        # Not spread: the key's own refusal.
        route = AddRoute(cache, "k", None, None, 2.0)
        self.assertIsInstance(route.replied(None), Reread)
        self.assertIsNone(done(self, route.reread(("k",))))
        # Its errors are raised as they are (not asked again).
        route = AddRoute(cache, "k", None, None, 2.0)
        error = BudgetInFlight("TRYAGAIN budget in flight")
        with self.assertRaises(BudgetInFlight) as raised:
            route.failed(error)
        self.assertIs(raised.exception, error)


class RoomInFlightTest(unittest.TestCase):
    def test_budget_in_flight_pauses_then_raises_past_the_wait(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 0.2)
        target = route.target
        error = BudgetInFlight("TRYAGAIN budget in flight")
        pauses: List[float] = []
        start = time.monotonic()
        with self.assertRaises(BudgetInFlight) as raised:
            while True:
                step = route.failed(error)
                assert isinstance(step, Pause), step
                pauses.append(step.seconds)
                time.sleep(step.seconds)
        self.assertIs(raised.exception, error)
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        self.assertEqual(pauses[:3], [0.005, 0.01, 0.02])
        self.assertLessEqual(max(pauses), 0.1)
        self.assertEqual(route.target, target)  # asked again, never skipped

    def test_no_wait_raises_at_once(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 0.0)
        with self.assertRaises(BudgetInFlight):
            route.failed(BudgetInFlight("TRYAGAIN budget in flight"))

    def test_a_cluster_client_that_gave_up_raises_the_adds_error(self) -> None:
        gave_up = ClusterError("TTL exhausted.")
        tokened = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 0.0)
        with self.assertRaises(AddAwaitsFold) as raised:
            tokened.failed(gave_up)
        self.assertIs(raised.exception.__cause__, gave_up)
        untokened = AddRoute(HolderCache(60_000), "k", None, HOLDERS, 0.0)
        with self.assertRaises(BudgetInFlight) as plain:
            untokened.failed(gave_up)
        self.assertNotIsInstance(plain.exception, AddAwaitsFold)
        self.assertIn("retry the add", str(plain.exception))

    def test_the_wait_starts_again_at_the_next_member(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 0.05)
        error = BudgetInFlight("TRYAGAIN budget in flight")
        self.assertIsInstance(route.failed(error), Pause)
        time.sleep(0.06)
        self.assertIsInstance(route.replied(None), Send)  # on to the next member
        step = route.failed(error)
        assert isinstance(step, Pause), step
        self.assertEqual(step.seconds, 0.005)


class FoldedTest(unittest.TestCase):
    def test_a_folded_holder_rereads_the_holders(self) -> None:
        cache = HolderCache(60_000)
        cache.learned("k", list(HOLDERS))
        token = token_at("h2")
        route = AddRoute(cache, "k", token, HOLDERS, 2.0)
        self.assertEqual(route.target, "h2")
        self.assertIsInstance(route.failed(HolderFolded("folded")), Reread)
        self.assertIsNone(cache.fresh("k"))  # forgotten: the holders are read again
        shrunk = ("k", "h1", "h3")
        self.assertIsInstance(route.reread(shrunk), Send)
        expected = holder_for_token(shrunk, token)
        self.assertEqual(route.target, "k" if expected == "h2" else expected)
        # Remembered for the token from now on.
        self.assertEqual(cache.target("k", shrunk, token), route.target)

    def test_an_untokened_add_goes_to_another_current_holder(self) -> None:
        for _ in range(20):
            route = untokened_at_a_holder(HolderCache(60_000))
            folded = route.target
            self.assertIsInstance(route.failed(HolderFolded("folded")), Reread)
            self.assertIsInstance(route.reread(HOLDERS), Send)
            self.assertNotEqual(route.target, folded)

    def test_the_key_given_folded_is_raised(self) -> None:
        route = AddRoute(HolderCache(60_000), "h2", None, ("h2",), 2.0)
        error = HolderFolded("folded")
        with self.assertRaises(HolderFolded) as raised:
            route.failed(error)
        self.assertIs(raised.exception, error)

    def test_a_folded_member_on_the_walk_is_passed(self) -> None:
        token = "t3"
        order = [HOLDERS[j] for j in probe_order(token, len(HOLDERS))]
        route = AddRoute(HolderCache(60_000), "k", token, HOLDERS, 2.0)
        self.assertIsInstance(route.replied(None), Send)
        self.assertEqual(route.target, order[1])
        self.assertIsInstance(route.failed(HolderFolded("folded")), Send)
        self.assertEqual(route.target, order[2])


class NotRunTest(unittest.TestCase):
    def test_a_timeout_raises_and_leaves_its_master_out(self) -> None:
        for token in (None, "t1"):
            cache = HolderCache(60_000)
            route = AddRoute(cache, "k", token, HOLDERS, 2.0)
            target = route.target
            error = redis.TimeoutError("Timeout reading from socket")
            with self.assertRaises(redis.TimeoutError) as raised:
                route.failed(error)
            self.assertIs(raised.exception, error)  # maybe counted: never sent elsewhere
            self.assertTrue(cache.away(target))

    def test_moved_sends_an_untokened_add_elsewhere(self) -> None:
        cache = HolderCache(60_000)
        route = untokened_at_a_holder(cache)
        first = route.target
        self.assertIsInstance(route.failed(MovedError("1234 127.0.0.1:7001")), Send)
        self.assertNotEqual(route.target, first)
        self.assertTrue(cache.away(first))
        # A connection refused too: it never ran there.
        second = route.target
        if second != "k":
            self.assertIsInstance(route.failed(redis.ConnectionError(REFUSED_CONNECT)), Send)
            self.assertNotIn(route.target, (first, second))

    def test_moved_raises_for_a_tokened_retry(self) -> None:
        cache = HolderCache(60_000)
        token = token_at("h1")
        self.assertEqual(AddRoute(cache, "k", token, HOLDERS, 2.0).target, "h1")
        retry = AddRoute(cache, "k", token, HOLDERS, 2.0)  # the token was sent before
        error = MovedError("1234 127.0.0.1:7001")
        with self.assertRaises(MovedError) as raised:
            retry.failed(error)
        self.assertIs(raised.exception, error)

    def test_a_tokened_add_goes_on_only_after_moved_at_its_first_send(self) -> None:
        # MOVED at the token's first send: this client can never write that holder.
        first = AddRoute(HolderCache(60_000), "k", token_at("h1"), HOLDERS, 2.0)
        self.assertIsInstance(first.failed(MovedError("1234 127.0.0.1:7001")), Send)
        self.assertNotEqual(first.target, "h1")
        # A master out of reach: raised (a retry must find the same holder).
        refused = AddRoute(HolderCache(60_000), "k", token_at("h1"), HOLDERS, 2.0)
        with self.assertRaises(redis.ConnectionError):
            refused.failed(redis.ConnectionError(REFUSED_CONNECT))

    def test_the_key_given_is_never_passed(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", None, ("k",), 2.0)
        with self.assertRaises(MovedError):
            route.failed(MovedError("1234 127.0.0.1:7001"))

    def test_an_untokened_walk_past_an_unreached_member_ends_with_its_error(self) -> None:
        cache = HolderCache(60_000)
        route = AddRoute(cache, "k", None, HOLDERS, 2.0)
        error = redis.ConnectionError(REFUSED_CONNECT)
        self.assertIsInstance(route.replied(None), Send)
        self.assertIsInstance(route.failed(error), Send)  # passed: on to the others
        with self.assertRaises(redis.ConnectionError) as raised:
            while isinstance(route.replied(None), Send):
                pass
        self.assertIs(raised.exception, error)

    def test_other_errors_are_raised(self) -> None:
        route = AddRoute(HolderCache(60_000), "k", "t1", HOLDERS, 2.0)
        error = redis.ResponseError("WRONGTYPE")
        with self.assertRaises(redis.ResponseError) as raised:
            route.failed(error)
        self.assertIs(raised.exception, error)


if __name__ == "__main__":
    unittest.main()
