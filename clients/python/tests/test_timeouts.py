"""A write whose reply times out counts at most once with redis-py's default settings (its
default ``retry`` resends a command after a timeout): the server is paused longer than the
client's ``socket_timeout`` (``CLIENT PAUSE ... WRITE`` from another connection), the write
raises ``TimeoutError``, and once the pause ends the counter shows it counted once or not at
all. Every write path: ``Ctr``, ``Pnc``, pipelines (plain and ``MULTI``/``EXEC``), asyncio,
the coalescing writers, on one server and on a cluster."""

from __future__ import annotations

import asyncio
import time
import unittest
from typing import Any, Callable, Iterator
from contextlib import contextmanager

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.cluster import RedisCluster
from redis.exceptions import TimeoutError

import redis_ctr
import redis_ctr.asyncio
from redis_ctr.asyncio import AsyncCtr

from ._typed import command, node_of
from .servers import CLUSTER_PORT, PORT, fresh

TIMEOUT = 0.2
PAUSE_MS = 700


@contextmanager
def paused(admin: Any, mode: str = "WRITE", ms: int = PAUSE_MS) -> Iterator[None]:
    """The server of ``admin`` paused for ``ms`` (writes held, their replies late); waits
    until the pause is over on leaving, so what the server ran is visible."""
    admin.execute_command("CLIENT", "PAUSE", ms, mode)
    started = time.monotonic()
    try:
        yield
    finally:
        left = ms / 1000 - (time.monotonic() - started)
        time.sleep(max(left, 0) + 0.1)


def master_of(cluster: RedisCluster, key: str) -> redis.Redis:
    """A plain client on the master serving ``key``."""
    node = node_of(cluster, key)
    return redis.Redis(host=node.host, port=node.port)


class SyncWritesCountOnce(unittest.TestCase):
    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT, socket_timeout=TIMEOUT)
        self.admin = redis.Redis(port=PORT)
        self.addCleanup(self.r.close)
        self.addCleanup(self.admin.close)

    def assert_once(self, write: Callable[[], Any], read: Callable[[], int]) -> None:
        with paused(self.admin):
            with self.assertRaises(TimeoutError):
                write()
        self.assertIn(read(), (0, 1))

    def test_plain_add(self) -> None:
        key = fresh("once")
        ctr = redis_ctr.Ctr(self.r)
        self.assert_once(lambda: ctr.add(key, 1), lambda: ctr.get(key))

    def test_add_with_ttl(self) -> None:
        key = fresh("once-ex")
        ctr = redis_ctr.Ctr(self.r)
        self.assert_once(lambda: ctr.add(key, 1, ex=60), lambda: ctr.get(key))

    def test_add_without_spread_awareness(self) -> None:
        key = fresh("once-plain")
        ctr = redis_ctr.Ctr(self.r, spread_refresh_ms=None)
        self.assert_once(lambda: ctr.add(key, 1), lambda: ctr.get(key))

    def test_untokened_purchase(self) -> None:
        key = fresh("once-buy")
        ctr = redis_ctr.Ctr(self.admin)
        ctr.add(key, 10)
        ctr.floor(key, 0)
        slow = redis_ctr.Ctr(self.r)
        self.assert_once(lambda: slow.decrfloor(key, 1), lambda: 10 - ctr.get(key))

    def test_pnc_add(self) -> None:
        key = fresh("once-pnc")
        pnc = redis_ctr.Pnc(self.r)
        self.assert_once(lambda: pnc.add(key, 1), lambda: redis_ctr.Pnc(self.admin).get(key))

    def test_pipelines(self) -> None:
        for transaction in (False, True):
            with self.subTest(transaction=transaction):
                key = fresh("once-pipe")
                pipe = redis_ctr.Ctr(self.r).pipeline(transaction=transaction)
                pipe.add(key, 1)
                self.assert_once(pipe.execute, lambda: redis_ctr.Ctr(self.admin).get(key))

    def test_the_connection_serves_the_next_write(self) -> None:
        key = fresh("once-next")
        ctr = redis_ctr.Ctr(self.r)
        with paused(self.admin):
            with self.assertRaises(TimeoutError):
                ctr.add(key, 1)
        self.assertIn(ctr.add(key, 1), (1, 2))


class WriterCloseDelivers(unittest.TestCase):
    """A sum whose reply timed out is held back (its master left out for 10 s); ``close``
    sends it again (same token) until the server answers, within ``close_timeout``."""

    def setUp(self) -> None:
        self.admin = redis.Redis(port=PORT)
        self.addCleanup(self.admin.close)

    def test_close_delivers_a_sum_held_back(self) -> None:
        key = fresh("close-held")
        r = redis.Redis(port=PORT, socket_timeout=TIMEOUT)
        writer = redis_ctr.CoalescingWriter(r, flush_interval_ms=60_000)
        writer.add(key, 5)
        command(self.admin, "CLIENT", "PAUSE", 3 * PAUSE_MS, "WRITE")
        with self.assertRaises(TimeoutError):
            writer.flush()  # the reply timed out: held back
        writer.close()  # no error: delivered once the pause is over
        self.assertEqual(redis_ctr.Ctr(self.admin).get(key), 5)
        r.close()

    def test_close_reports_what_it_could_not_deliver(self) -> None:
        key = fresh("close-undelivered")
        r = redis.Redis(port=PORT, socket_timeout=TIMEOUT)
        writer = redis_ctr.CoalescingWriter(r, flush_interval_ms=60_000, close_timeout=0.3)
        writer.add(key, 5)
        with paused(self.admin, ms=3 * PAUSE_MS):
            with self.assertRaises(redis_ctr.Undelivered) as raised:
                writer.close()
        self.assertEqual([(k, d) for k, d, _ in raised.exception.sums], [(key, 5)])
        self.assertIn(redis_ctr.Ctr(self.admin).get(key), (0, 5))
        r.close()

    def test_async_close_delivers_a_sum_held_back(self) -> None:
        async def scenario() -> None:
            key = fresh("close-held-async")
            r = redis.asyncio.Redis(port=PORT, socket_timeout=TIMEOUT)
            writer = redis_ctr.asyncio.AsyncCoalescingWriter(r, flush_interval_ms=60_000)
            await writer.add(key, 5)
            command(self.admin, "CLIENT", "PAUSE", 3 * PAUSE_MS, "WRITE")
            with self.assertRaises(TimeoutError):
                await writer.flush()
            await writer.close()
            self.assertEqual(redis_ctr.Ctr(self.admin).get(key), 5)
            await r.aclose()

        asyncio.run(scenario())


class AsyncWritesCountOnce(unittest.TestCase):
    def test_plain_add_and_pipeline(self) -> None:
        async def scenario() -> None:
            r = redis.asyncio.Redis(port=PORT, socket_timeout=TIMEOUT)
            admin = redis.Redis(port=PORT)
            ctr = AsyncCtr(r)
            for write in ("add", "add-ex", "pipeline", "transaction"):
                key = fresh("once-async")
                with paused(admin):
                    with self.assertRaises(TimeoutError, msg=write):
                        if write == "add":
                            await ctr.add(key, 1)
                        elif write == "add-ex":
                            await ctr.add(key, 1, ex=60)
                        else:
                            pipe = ctr.pipeline(transaction=write == "transaction")
                            await pipe.add(key, 1).execute()
                    # The pause is waited out in the event loop's thread: nothing else runs.
                self.assertIn(redis_ctr.Ctr(admin).get(key), (0, 1), write)
            await r.aclose()
            admin.close()

        asyncio.run(scenario())


@unittest.skipUnless(CLUSTER_PORT, "no cluster")
class ClusterWritesCountOnce(unittest.TestCase):
    def setUp(self) -> None:
        self.r = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, socket_timeout=TIMEOUT)
        self.addCleanup(self.r.close)

    def test_adds(self) -> None:
        for options in ({}, {"ex": 60}, {"token": None}):
            with self.subTest(options=options):
                key = fresh("once-cluster")
                ctr = redis_ctr.Ctr(self.r)
                admin = master_of(self.r, key)
                self.addCleanup(admin.close)
                with paused(admin):
                    with self.assertRaises(TimeoutError):
                        ctr.add(key, 1, **options)
                self.assertIn(redis_ctr.Ctr(admin).get(key), (0, 1))

    def test_pipelines(self) -> None:
        for transaction in (False, True):
            with self.subTest(transaction=transaction):
                key = fresh("once-cluster-pipe")
                admin = master_of(self.r, key)
                self.addCleanup(admin.close)
                ctr = redis_ctr.Ctr(self.r)
                pipe = ctr.pipeline(transaction=transaction)
                pipe.add(key, 1)
                with paused(admin):
                    with self.assertRaises(TimeoutError):
                        pipe.execute()
                self.assertIn(redis_ctr.Ctr(admin).get(key), (0, 1))
                # The connection the late reply was due on is not read again.
                pipe.add(key, 1).get(key)
                first = pipe.execute()
                self.assertEqual(first[0], first[1])

    def test_async_add(self) -> None:
        async def scenario() -> None:
            r = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, socket_timeout=TIMEOUT)
            options: Any  # keywords of an add, passed on with **
            for options in ({}, {"ex": 60}):
                key = fresh("once-async-cluster")
                admin = master_of(self.r, key)
                with paused(admin):
                    with self.assertRaises(TimeoutError):
                        await AsyncCtr(r).add(key, 1, **options)
                self.assertIn(redis_ctr.Ctr(admin).get(key), (0, 1))
                admin.close()
            for transaction in (False, True):
                key = fresh("once-async-cluster-pipe")
                admin = master_of(self.r, key)
                pipe = AsyncCtr(r).pipeline(transaction=transaction)
                pipe.add(key, 1)
                with paused(admin):
                    with self.assertRaises(TimeoutError, msg=f"transaction={transaction}"):
                        await pipe.execute()
                self.assertIn(redis_ctr.Ctr(admin).get(key), (0, 1))
                admin.close()
            await r.aclose()

        asyncio.run(scenario())


if __name__ == "__main__":
    unittest.main()
