"""The coalescing writers on a spread counter that shrinks and grows under them: every sum
reaches the counter exactly once (issue 26, finding 1: sums meeting a holder folded back were
dropped). On one server and on the 3-master cluster, sync and asyncio. And the clients at a
holder whose fold is on its way: a new token's add and a refund are asked again there, never
passed on early."""

from __future__ import annotations

import time
import unittest
from typing import Any, List, Tuple

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from redis_ctr import AddAwaitsFold, CoalescingWriter, Ctr, HolderFolded, RefundAwaitsFold, Undelivered
from redis_ctr._spread import holder_for_token
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr

from .proxy import ReplyDroppingProxy
from .servers import CLUSTER_PORT, HELD_PORT, PORT, fresh, info_stat
from .test_writer import client

# (holders the other client spreads the key to, adds made through the writer after it)
STEPS = ((16, 100), (1, 100), (8, 100), (2, 100), (16, 100), (1, 100))


def check_writer_through_shrinks(
    test: unittest.TestCase, r: Any, other: Any, folds_at_once: bool = True
) -> None:
    """Another client changes the spread under a writer that trusts its holder list for a
    minute. After a grow the writer is made to read the list again (as it would once its
    refresh time is over); at a shrink it still holds the longer list, so its sums meet
    folded holders: they must be sent on (none dropped, at least one rerouted) and the total
    must be exact after every step. ``folds_at_once``: on one server a shrink folds its
    holders before it replies, so every shrink makes sums meet folded holders; across masters
    they are folded in the background, and a sum may still land on a holder before its fold
    (and be folded with it)."""
    key = fresh("folds")
    ctr = Ctr(other)
    total, previous = 0, 1
    with CoalescingWriter(r, flush_interval_ms=60_000, spread_refresh_ms=60_000) as writer:
        for holders, adds in STEPS:
            ctr.spread(key, holders)
            if holders > previous:
                writer._ctr._holders_after_fold(key)  # the writer learns the grown list
            rerouted = writer.stats.rerouted
            for n in range(adds):
                writer.add(key)
                if n % 10 == 9:
                    writer.flush()  # ten sums per step, each on its token's holder
            total += adds
            step = f"the step from {previous} to {holders} holders"
            test.assertEqual(ctr.get(key), total, step)
            test.assertEqual(writer.stats.dropped, 0, (step, writer.last_error))
            if folds_at_once or holders > previous:
                test.assertEqual(writer.stats.rerouted > rerouted, holders < previous, step)
            previous = holders
    test.assertEqual(writer.stats.flushed_sums, sum(adds for _, adds in STEPS) // 10)
    test.assertEqual(writer.stats.dropped, 0)
    test.assertEqual(ctr.get(key), total)


async def check_async_writer_through_shrinks(
    test: unittest.TestCase, r: Any, other: Any, folds_at_once: bool = True
) -> None:
    """:func:`check_writer_through_shrinks` with the asyncio writer."""
    key = fresh("async-folds")
    ctr = AsyncCtr(other)
    total, previous = 0, 1
    writer = AsyncCoalescingWriter(r, flush_interval_ms=60_000, spread_refresh_ms=60_000)
    async with writer:
        for holders, adds in STEPS:
            await ctr.spread(key, holders)
            if holders > previous:
                await writer._ctr._holders_after_fold(key)
            rerouted = writer.stats.rerouted
            for n in range(adds):
                await writer.add(key)
                if n % 10 == 9:
                    await writer.flush()
            total += adds
            step = f"the step from {previous} to {holders} holders"
            test.assertEqual(await ctr.get(key), total, step)
            test.assertEqual(writer.stats.dropped, 0, (step, writer.last_error))
            if folds_at_once or holders > previous:
                test.assertEqual(writer.stats.rerouted > rerouted, holders < previous, step)
            previous = holders
    test.assertEqual(writer.stats.flushed_sums, sum(adds for _, adds in STEPS) // 10)
    test.assertEqual(writer.stats.dropped, 0)
    test.assertEqual(await ctr.get(key), total)


WAIT = 0.4
"""The purchase wait of the clients that meet a holder mid-fold (seconds)."""


def spread_to_fold(prefix: str) -> Tuple[str, List[Any], str, str, str]:
    """On the server that holds fold credits: a counter spread to 3 holders, a tokened add
    (``counted``) and a tokened sale (``sold``, a grant) on the last holder. Returns the key,
    its holders, and those two tokens with a third (``new``) that also picks the last holder."""
    r = redis.Redis(port=HELD_PORT)
    key, ctr = fresh(prefix), Ctr(r, spread_refresh_ms=None)
    ctr.add(key, 10)
    holders = ctr.spread(key, 3)
    counted, sold, new = (
        next(t for t in (f"{p}-{i}" for i in range(1000)) if holder_for_token(holders, t) == holders[2])
        for p in ("counted", "sold", "new")
    )
    ctr.add(holders[2], 5, token=counted)
    ctr.add(holders[2], -3, token=sold)
    r.close()
    return key, holders, counted, sold, new


def fold_mid_way(key: str, holders: List[Any]) -> None:
    """A shrink of ``key`` to 1 on the server that holds fold credits: returns once the last
    holder is sealed, its fold on its way for good."""
    r = redis.Redis(port=HELD_PORT)
    Ctr(r).spread(key, 1)
    deadline = time.monotonic() + 20
    while not sealed(r, holders[2]):
        assert time.monotonic() < deadline, "never sealed"
        time.sleep(0.02)
    r.close()


def sealed(r: Any, holder: Any) -> bool:
    """True when the holder refuses an add of a token it never saw (sealed)."""
    try:
        r.execute_command("CTR.ADD", holder, 0)
    except redis.exceptions.ResponseError:
        return True
    return False


class FoldTest(unittest.TestCase):
    def test_writer_sums_count_once_through_shrinks_and_grows(self) -> None:
        check_writer_through_shrinks(self, client(), client())

    def test_a_sum_whose_reply_was_lost_counts_once_after_its_holder_folded(self) -> None:
        """A sum lands on a holder and its reply is lost; the holder is folded back before the
        retry. The retry goes to the same holder, which replays it: counted once, not sent on
        (sending it elsewhere would count it twice)."""
        key, r = fresh("lost-fold"), client()
        holders = Ctr(r).spread(key, 16)
        # A writer id whose first token picks a holder other than the home key.
        writer_id = next(
            w for w in (f"lost-{i}" for i in range(100))
            if holder_for_token(holders, f"{w}:1") != key
        )
        before = info_stat(r, "ctr_duplicates_ignored")
        proxy = ReplyDroppingProxy(PORT, b"CTR.ADD", drops=1)
        try:
            writer = CoalescingWriter(
                client(proxy.port), flush_interval_ms=60_000, writer_id=writer_id, retries=0
            )
            for _ in range(7):
                writer.add(key)
            with self.assertRaises(redis.exceptions.ConnectionError):
                writer.flush()  # applied, its reply lost, no retry left
            self.assertEqual(Ctr(r).get(key), 7)
            Ctr(r).spread(key, 1)  # folds the holder that counted it
            with self.assertRaises(HolderFolded):
                Ctr(r, spread_refresh_ms=None).add(holder_for_token(holders, f"{writer_id}:1"), 1)
            writer.close()  # the retry: the folded holder replays its first answer
        finally:
            proxy.close()
        self.assertEqual(Ctr(r).get(key), 7)
        self.assertEqual(info_stat(r, "ctr_duplicates_ignored") - before, 1)
        self.assertEqual((writer.stats.dropped, writer.stats.rerouted), (0, 0))
        self.assertEqual(writer.stats.flushed_sums, 1)

    def test_adds_meeting_a_folded_holder_go_on_and_count_once(self) -> None:
        """Ctr.add with a stale holder list after a shrink to 1: tokened and untokened adds go
        on to the home (none raises), a tokened retry counts once, and one whose first send
        landed before the fold is replayed by the folded holder, not sent on."""
        key, r = fresh("add-folds"), client()
        stale = Ctr(r, spread_refresh_ms=60_000)
        holders = stale.spread(key, 16)
        landed = next(f"t{i}" for i in range(100) if holder_for_token(holders, f"t{i}") != key)
        self.assertEqual(stale.add(key, 5, token=landed), 5)  # on its holder, before the fold
        Ctr(r).spread(key, 1)
        # Replayed by the folded holder (a replayed add replies the holder's value, 0 now
        # that its units are home), not sent on: the total below counts it once.
        self.assertEqual(stale.add(key, 5, token=landed), 0)
        tokens = [f"after-{i}" for i in range(20)]
        for token in tokens:
            stale.add(key, 1, token=token)
            stale.add(key, 1, token=token)  # a retry: on the holder the first send went to
            Ctr(r).add(key, 1, token=token)  # another process, which knows the new list
        for _ in range(20):
            stale.add(key, 1)
        self.assertEqual(Ctr(r).get(key), 5 + 20 + 20)
        self.assertEqual(stale.holders(key), [key])

    @unittest.skipUnless(HELD_PORT, "no server holding fold credits")
    def test_a_holder_mid_fold_is_asked_again_and_never_passed_early(self) -> None:
        """With the list from before a shrink, an add of a new token and the refund of a sale
        both meet the holder sealed, its fold on its way (never landing here): each is asked
        again for ``purchase_wait``, then raises (``AddAwaitsFold``, ``RefundAwaitsFold``),
        nothing changed; a token it counted replays at once."""
        key, holders, counted, sold, new = spread_to_fold("mid-fold")
        r = redis.Redis(port=HELD_PORT)
        stale = Ctr(r, spread_refresh_ms=60_000, purchase_wait=WAIT)
        self.assertEqual(stale.holders(key), holders)  # kept for a minute
        fold_mid_way(key, holders)
        started = time.monotonic()
        with self.assertRaises(AddAwaitsFold):
            stale.add(key, 5, token=new)
        self.assertGreaterEqual(time.monotonic() - started, WAIT)
        started = time.monotonic()
        with self.assertRaises(RefundAwaitsFold):
            stale.refund(key, sold)
        self.assertGreaterEqual(time.monotonic() - started, WAIT)
        started = time.monotonic()
        self.assertEqual(stale.add(key, 5, token=counted), 0, "replayed: its units are on their way")
        self.assertLess(time.monotonic() - started, WAIT)
        self.assertEqual(Ctr(r).get(key), 12)

    @unittest.skipUnless(HELD_PORT, "no server holding fold credits")
    def test_a_writers_sum_meeting_a_holder_mid_fold_is_kept(self) -> None:
        """A sum whose token picks a holder mid-fold is sent to that holder again, never
        dropped nor sent on: the flush raises ``AddAwaitsFold`` with the sum kept."""
        key, holders, _, _, _ = spread_to_fold("writer-mid-fold")
        r = redis.Redis(port=HELD_PORT)
        writer = CoalescingWriter(
            r, flush_interval_ms=60_000, spread_refresh_ms=60_000, retries=1,
            retry_backoff_ms=10, close_timeout=0.3,
        )
        writer.add(key)
        writer.flush()  # the writer learns the three holders
        fold_mid_way(key, holders)
        adds, held = 1, None
        for _ in range(20):
            writer.add(key)
            adds += 1
            try:
                writer.flush()
            except AddAwaitsFold as e:
                held = e
                break
        self.assertIsNotNone(held, "no sum met the holder mid-fold")
        self.assertEqual(writer.stats.dropped, 0)
        counted = Ctr(r).get(key)
        with self.assertRaises(Undelivered) as caught:
            writer.close()
        self.assertEqual(counted + sum(s[1] for s in caught.exception.sums), 12 + adds)

    @unittest.skipUnless(CLUSTER_PORT, "no cluster")
    def test_writer_sums_count_once_through_shrinks_on_the_cluster(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        other = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, decode_responses=True)
        try:
            check_writer_through_shrinks(self, rc, other, folds_at_once=False)
        finally:
            rc.close()
            other.close()


class AsyncFoldTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_writer_sums_count_once_through_shrinks_and_grows(self) -> None:
        r, other = redis.asyncio.Redis(port=PORT), redis.asyncio.Redis(port=PORT, protocol=3)
        self.addAsyncCleanup(r.aclose)
        self.addAsyncCleanup(other.aclose)
        await check_async_writer_through_shrinks(self, r, other)

    async def test_async_adds_meeting_a_folded_holder_go_on_and_count_once(self) -> None:
        key, r = fresh("async-add-folds"), redis.asyncio.Redis(port=PORT)
        self.addAsyncCleanup(r.aclose)
        stale = AsyncCtr(r, spread_refresh_ms=60_000)
        holders = await stale.spread(key, 16)
        landed = next(f"t{i}" for i in range(100) if holder_for_token(holders, f"t{i}") != key)
        self.assertEqual(await stale.add(key, 5, token=landed), 5)
        await AsyncCtr(r).spread(key, 1)
        self.assertEqual(await stale.add(key, 5, token=landed), 0, "replayed where it landed")
        for i in range(20):
            await stale.add(key, 1, token=f"after-{i}")
            await stale.add(key, 1, token=f"after-{i}")
            await stale.add(key, 1)
        self.assertEqual(await AsyncCtr(r).get(key), 5 + 20 + 20)

    @unittest.skipUnless(HELD_PORT, "no server holding fold credits")
    async def test_async_a_holder_mid_fold_is_asked_again_and_never_passed_early(self) -> None:
        """The sync test above through AsyncCtr."""
        key, holders, counted, sold, new = spread_to_fold("async-mid-fold")
        r = redis.asyncio.Redis(port=HELD_PORT)
        self.addAsyncCleanup(r.aclose)
        stale = AsyncCtr(r, spread_refresh_ms=60_000, purchase_wait=WAIT)
        self.assertEqual(await stale.holders(key), holders)
        fold_mid_way(key, holders)
        started = time.monotonic()
        with self.assertRaises(AddAwaitsFold):
            await stale.add(key, 5, token=new)
        with self.assertRaises(RefundAwaitsFold):
            await stale.refund(key, sold)
        self.assertGreaterEqual(time.monotonic() - started, 2 * WAIT)
        self.assertEqual(await stale.add(key, 5, token=counted), 0)
        self.assertEqual(await AsyncCtr(r).get(key), 12)

    @unittest.skipUnless(CLUSTER_PORT, "no cluster")
    async def test_async_writer_sums_count_once_through_shrinks_on_the_cluster(self) -> None:
        rc = AsyncRedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        other = AsyncRedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addAsyncCleanup(rc.aclose)
        self.addAsyncCleanup(other.aclose)
        await check_async_writer_through_shrinks(self, rc, other, folds_at_once=False)
