"""What the types promise, at run time: a plain add is an int (a floor's refusal raises unless
asked for None), holder lists are lists in the key's own type (str or bytes) from spread() and
holders() alike, one module layout (the asyncio classes in redis_ctr.asyncio, the old name kept),
and a client of the wrong kind refused at construction. tests/typing_check.py checks the same
with mypy --strict (make lint)."""

from __future__ import annotations

import asyncio
import unittest

import redis
import redis.asyncio

import redis_ctr
import redis_ctr.asyncio
from redis_ctr import CoalescingWriter, Ctr, FloorRefused, Pnc
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr, AsyncPnc

from .servers import PORT, fresh


class TypesTest(unittest.TestCase):
    def test_a_plain_add_is_an_int_and_a_refusal_says_so(self) -> None:
        r = redis.Redis(port=PORT)
        self.addCleanup(r.close)
        ctr, key = Ctr(r), fresh("typed")
        self.assertIs(type(ctr.add(key, 5)), int)
        self.assertIs(type(ctr.add(key, 1, token="t")), int)
        ctr.floor(key, 0)
        with self.assertRaises(FloorRefused) as raised:
            ctr.add(key, -10)
        self.assertIsInstance(raised.exception, redis_ctr.BelowFloor)
        with self.assertRaises(FloorRefused):  # a tokened refusal is remembered
            ctr.add(key, -10, token="r1")
        self.assertIsNone(ctr.add(key, -10, token="r1", refusable=True))
        self.assertEqual(ctr.add(key, -1, refusable=True), 5)
        self.assertEqual(ctr.get(key), 5)

    def test_holder_lists_are_lists_in_the_keys_type(self) -> None:
        for decode in (False, True):
            r = redis.Redis(port=PORT, decode_responses=decode)
            ctr = Ctr(r)
            key = fresh("names")
            spread = ctr.spread(key, 3)
            self.assertIsInstance(spread, list)
            self.assertEqual(ctr.holders(key), spread)
            self.assertTrue(all(type(n) is str for n in spread), spread)
            self.assertEqual(Ctr(r).holders(key), spread, "read from CTR.HOLDERS")
            bkey = fresh("bnames").encode()
            bspread = ctr.spread(bkey, 3)
            self.assertTrue(all(type(n) is bytes for n in bspread), bspread)
            self.assertEqual(bspread[0], bkey)
            self.assertEqual(ctr.holders(bkey), bspread)
            self.assertEqual(Ctr(r).holders(bkey), bspread, "read from CTR.HOLDERS")
            self.assertEqual([n.decode() for n in bspread], Ctr(r).holders(bkey.decode()))
            self.assertEqual(ctr.holders(fresh("plain").encode())[0][:6], b"plain:")
            r.close()

    def test_one_module_layout(self) -> None:
        self.assertIs(redis_ctr.asyncio.AsyncCoalescingWriter, redis_ctr.AsyncCoalescingWriter)
        for name in ("AsyncCtr", "AsyncPnc", "AsyncCoalescingWriter", "AsyncCtrPipeline"):
            self.assertIn(name, redis_ctr.asyncio.__all__)

    def test_a_client_of_the_wrong_kind_is_refused_at_construction(self) -> None:
        async_client = redis.asyncio.Redis(port=PORT)
        for make in (Ctr, Pnc, CoalescingWriter):
            with self.assertRaises(TypeError) as raised:
                make(async_client)  # type: ignore[arg-type]
            self.assertIn("redis_ctr.asyncio.Async", str(raised.exception))
        sync_client = redis.Redis(port=PORT)
        self.addCleanup(sync_client.close)
        for amake in (AsyncCtr, AsyncPnc, AsyncCoalescingWriter):
            with self.assertRaises(TypeError):
                amake(sync_client)  # type: ignore[arg-type]
        asyncio.run(async_client.aclose())


class AsyncTypesTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_adds_and_holder_lists(self) -> None:
        client = redis.asyncio.Redis(port=PORT)
        ctr, key = AsyncCtr(client), fresh("atyped")
        self.assertIs(type(await ctr.add(key, 2)), int)
        await ctr.floor(key, 0)
        with self.assertRaises(FloorRefused):
            await ctr.add(key, -3)
        self.assertIsNone(await ctr.add(key, -3, refusable=True))
        spread = await ctr.spread(key, 3)
        self.assertEqual(await AsyncCtr(client).holders(key), spread)
        bspread = await ctr.spread(fresh("ab").encode(), 2)
        self.assertTrue(all(type(n) is bytes for n in bspread))
        await client.aclose()


if __name__ == "__main__":
    unittest.main()
