"""The coalescing writer: sums, flush triggers, exactly-once flushes when replies are lost,
the key cap, and the flush at interpreter exit."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import unittest

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

import redis_ctr
from redis_ctr import CoalescingWriter, Ctr, WriterFull
from redis_ctr.asyncio import AsyncCoalescingWriter

from .proxy import ReplyDroppingProxy
from .servers import PORT, fresh, info_stat


def client(port: int = PORT) -> redis.Redis:
    # No redis-py retries: the writer's own retry (same token) is what is under test.
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), socket_timeout=5)


def unused_port() -> int:
    """A port bound and released without listening: connections to it are refused."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port: int = unused.getsockname()[1]
    return port


class WriterTest(unittest.TestCase):
    def test_adds_are_summed_into_few_commands(self) -> None:
        keys = [fresh(f"sum{i}") for i in range(4)]
        r = client()
        with CoalescingWriter(r, flush_every=1000, flush_interval_ms=60_000) as writer:
            for n in range(10_000):
                writer.add(keys[n % 4], 1 if n % 5 else 3)
        self.assertEqual(sum(Ctr(r).get(k) for k in keys), 14_000)
        # A flush per 1000 adds (4 keys each) and the final one at close.
        self.assertLessEqual(writer.stats.commands, 4 * 11)
        self.assertEqual(writer.stats.adds, 10_000)

    def test_a_timed_flush_without_close(self) -> None:
        key, r = fresh("timed"), client()
        writer = CoalescingWriter(r, flush_interval_ms=20)
        writer.add(key, 7)
        deadline = time.time() + 10
        while Ctr(r).get(key) != 7:
            self.assertLess(time.time(), deadline, "no timed flush")
            time.sleep(0.01)
        writer.close()
        self.assertEqual(writer.stats.commands, 1)

    def test_lost_replies_are_retried_with_the_same_token_and_count_once(self) -> None:
        key, r = fresh("lost"), client()
        before = info_stat(r, "ctr_duplicates_ignored")
        proxy = ReplyDroppingProxy(PORT, b"CTR.ADD", drops=3)
        try:
            with CoalescingWriter(client(proxy.port), flush_every=100, flush_interval_ms=60_000) as writer:
                for _ in range(1000):
                    writer.add(key)
        finally:
            proxy.close()
        self.assertEqual(proxy.dropped, 3)
        self.assertEqual(Ctr(r).get(key), 1000)
        self.assertEqual(writer.stats.retries, 3)
        # The server saw each lost flush twice and ignored the second copy.
        self.assertEqual(info_stat(r, "ctr_duplicates_ignored") - before, 3)

    def test_the_key_cap_bounds_memory(self) -> None:
        writer = CoalescingWriter(client(unused_port()), max_keys=3, retries=0, flush_interval_ms=60_000)
        for key in ("a", "b", "c", "a"):
            writer.add(key)
        with self.assertRaises(WriterFull):
            writer.add("d")
        with self.assertRaises(redis.exceptions.ConnectionError) as raised:
            writer.close(timeout=0)
        self.assertIsInstance(raised.exception, redis_ctr.Undelivered)
        self.assertIsInstance(raised.exception.__cause__, redis.exceptions.ConnectionError)

    def test_pending_adds_are_flushed_at_interpreter_exit(self) -> None:
        key = fresh("atexit")
        program = (
            "import redis, redis_ctr, sys\n"
            "w = redis_ctr.CoalescingWriter(redis.Redis(port=int(sys.argv[1])), flush_interval_ms=60000)\n"
            "for _ in range(5): w.add(sys.argv[2])\n"
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        subprocess.run([sys.executable, "-c", program, str(PORT), key], check=True, env=env)
        self.assertEqual(Ctr(client()).get(key), 5)


def async_client(port: int = PORT) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=port, retry=AsyncRetry(NoBackoff(), 0), socket_timeout=5)


class AsyncWriterTest(unittest.IsolatedAsyncioTestCase):
    async def test_lost_replies_count_once_and_sums_coalesce(self) -> None:
        key, r = fresh("async-lost"), client()
        before = info_stat(r, "ctr_duplicates_ignored")
        proxy = ReplyDroppingProxy(PORT, b"CTR.ADD", drops=2)
        try:
            async with AsyncCoalescingWriter(async_client(proxy.port), flush_every=100) as writer:
                for _ in range(1000):
                    await writer.add(key)
        finally:
            proxy.close()
        self.assertEqual(Ctr(r).get(key), 1000)
        self.assertEqual((proxy.dropped, writer.stats.retries), (2, 2))
        self.assertEqual(info_stat(r, "ctr_duplicates_ignored") - before, 2)
        self.assertLessEqual(writer.stats.commands, 12 + 2)

    async def test_a_timed_flush_and_the_key_cap(self) -> None:
        key = fresh("async-timed")
        writer = AsyncCoalescingWriter(async_client(), flush_interval_ms=20)
        await writer.add(key, 4)
        for _ in range(500):
            if Ctr(client()).get(key) == 4:
                break
            await asyncio.sleep(0.01)
        self.assertEqual(Ctr(client()).get(key), 4)
        await writer.close()

        capped = AsyncCoalescingWriter(async_client(unused_port()), max_keys=2, retries=0)
        await capped.add("a")
        await capped.add("b")
        with self.assertRaises(WriterFull):
            await capped.add("c")
        with self.assertRaises(redis.exceptions.ConnectionError):
            await capped.close(timeout=0)


if __name__ == "__main__":
    unittest.main()
