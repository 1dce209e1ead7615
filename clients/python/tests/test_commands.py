"""Every CTR.* and PNC.* method against the module, on RESP2 and RESP3, with and without
decode_responses, and every error class the typed methods can meet."""

from __future__ import annotations

import decimal
import fractions
import re
import time
import unittest
from pathlib import Path
from typing import Any, Dict, cast

import redis

import redis_ctr
from redis_ctr import Ctr, Pnc

from ._typed import command
from .servers import PORT, fresh, watermark_ms
from .test_spread import waiting_holder

CLIENT_FORMS = [
    {"protocol": 2, "decode_responses": False},
    {"protocol": 2, "decode_responses": True},
    {"protocol": 3, "decode_responses": False},
    {"protocol": 3, "decode_responses": True},
]


def exercise_ctr(test: unittest.TestCase, ctr: Ctr) -> dict[str, Any]:
    """Every CTR method once; returns the floored counter's CTR.INFO."""
    tag = fresh("{v") + "}"
    views, stock, paid, log = tag + ":views", fresh("stock"), fresh("paid"), tag + ":log"
    test.assertEqual(ctr.add(views, 41), 41)
    test.assertEqual(ctr.add(views, 1, ex=60), 42)
    test.assertEqual(ctr.get(views), 42)
    test.assertEqual(ctr.get(fresh("none")), 0)
    test.assertEqual(ctr.mget(views, tag + ":none"), [42, 0])
    for _ in range(3):
        test.assertEqual(ctr.add(paid, 5, token="order-1"), 5)
    test.assertEqual(ctr.add(paid, 1, token=b"order-2", at=int(time.time() * 1000)), 6)
    test.assertEqual(ctr.clear(paid, token="clear-1"), 6)
    test.assertEqual(ctr.clear(paid, token="clear-1"), 0)
    test.assertEqual(ctr.add(stock, 5), 5)
    test.assertIsNone(cast(object, ctr.floor(stock, 0)))  # cast: None as a value, for mypy
    test.assertEqual(ctr.decrfloor(stock, 4, token="o1"), 1)
    test.assertIsNone(ctr.decrfloor(stock, 4, token="o2"))
    test.assertIsNone(ctr.add(stock, -4, refusable=True))
    with test.assertRaises(redis_ctr.FloorRefused):  # a BelowFloor, by default
        ctr.add(stock, -4)
    test.assertEqual(ctr.decrfloor(stock, 4, token="o1"), 1)
    info = ctr.info(stock)
    assert info is not None
    test.assertEqual((info["value"], info["floor"], sum(info["budgets"] or [])), (1, 0, 1))
    test.assertEqual(info["encoding"], "boxed")
    test.assertIsNone(ctr.info(fresh("none")))
    test.assertIsNone(cast(object, ctr.floor(stock, None)))
    test.assertIsNone(ctr.info(stock)["floor"])  # type: ignore[index]
    test.assertEqual(ctr.reconcile(views, 40), (40, 2))
    counted = tag + ":counted"
    ctr.add(counted, 3)
    command(ctr.client, "XADD", log, "*", "n", "1")
    test.assertEqual(ctr.reconcile_from(counted, "STREAM", log), redis_ctr.Reconciled(1, 2))
    return {k: v for k, v in info.items() if k != "add_rate"}


def exercise_pnc(test: unittest.TestCase, pnc: Pnc) -> dict[str, Any]:
    """Every PNC method once; returns a PNC.INFO."""
    likes, copy = fresh("likes"), fresh("likes-copy")
    test.assertEqual(pnc.add(likes, 10), 10)
    test.assertEqual(pnc.add(likes, -3), 7)
    test.assertEqual(pnc.get(likes), 7)
    state = pnc.state(likes)
    assert state is not None
    test.assertIsInstance(state, bytes)
    test.assertIsNone(pnc.state(fresh("none")))
    test.assertEqual(pnc.merge(copy, state), 7)
    test.assertEqual(pnc.merge(copy, state), 7)
    info = pnc.info(likes)
    test.assertEqual(info["value"], 7)
    test.assertEqual(info["home"], info["replica-id"])
    test.assertEqual([(r["p"], r["n"]) for r in info["replicas"]], [(10, 3)])
    test.assertEqual(pnc.clear(likes), 7)
    test.assertEqual(pnc.get(likes), 0)
    test.assertEqual(pnc.info(fresh("none"))["replicas"], [])
    # The bounded counter: rights from increments, spent here only, given away.
    stock = fresh("stock")
    pnc.add(stock, 10)
    test.assertIsNone(cast(object, pnc.floor(stock, 0)))
    test.assertEqual(pnc.decrfloor(stock, 3, token="o1"), 7)
    test.assertEqual(pnc.decrfloor(stock, 3, token="o1"), 7)
    test.assertIsNone(pnc.decrfloor(stock, 100))
    test.assertEqual(pnc.give(stock, "elsewhere", 2), 5)
    test.assertIsNone(pnc.give(stock, "elsewhere", 50))
    bounded = pnc.info(stock)
    test.assertEqual(
        (bounded["floor"], bounded["floor-level"], bounded["rights"], bounded["refused"]),
        (0, 0, 5, 100),
    )
    test.assertIsNone(cast(object, pnc.floor(stock, None)))
    test.assertIsNone(pnc.info(stock)["floor"])
    test.assertNotIn("rights", info, "a plain counter has no bounded fields")
    return dict(info)


class CommandsTest(unittest.TestCase):
    def test_every_method_replies_the_same_whatever_the_protocol(self) -> None:
        ctr_infos, pnc_infos = [], []
        for form in CLIENT_FORMS:
            with self.subTest(**form):
                r = redis.Redis(port=PORT, **form)  # type: ignore[arg-type]
                ctr_infos.append(exercise_ctr(self, Ctr(r)))
                pnc_infos.append(exercise_pnc(self, Pnc(r)))
        self.assertTrue(all(i == ctr_infos[0] for i in ctr_infos), ctr_infos)
        # Same replica id and slots everywhere; only the key names differ.
        self.assertTrue(all(i == pnc_infos[0] for i in pnc_infos), pnc_infos)


class LimitersTest(unittest.TestCase):
    def test_throttle_replies_a_typed_result_and_replays_a_token(self) -> None:
        for form in CLIENT_FORMS:
            with self.subTest(**form):
                ctr = Ctr(redis.Redis(port=PORT, **form))  # type: ignore[arg-type]
                key, now = fresh("limiter"), int(time.time() * 1000)
                first = ctr.throttle(key, 4, 1, 60, token="req-1", at=now)
                self.assertEqual(first, redis_ctr.Throttled(False, 5, 4, -1, 60))
                self.assertEqual(ctr.throttle(key, 4, 1, 60, token="req-1", at=now), first)
                self.assertEqual(ctr.throttle(key, 4, 1, 60, 0, at=now).remaining, 4)
                refused = ctr.throttle(key, 4, 1, 60, 5, at=now)
                self.assertTrue(refused.limited)
                self.assertEqual((refused.retry_after, refused.reset_after), (60, 60))

    def test_window_makes_the_value_the_last_windows_sum(self) -> None:
        ctr = Ctr(redis.Redis(port=PORT))
        key, now = fresh("window"), int(time.time() * 1000)
        ctr.window(key, 10_000, buckets=10)
        self.assertEqual(ctr.add(key, 3, at=now), 3)
        self.assertEqual(ctr.add(key, 2, at=now + 5_000), 5)
        self.assertEqual(ctr.add(key, 1, at=now + 10_000), 3)
        info = ctr.info(key)
        assert info is not None
        self.assertEqual((info["window_ms"], info["window_buckets"]), (10_000, 10))
        ctr.window(key, None)
        self.assertIsNone(ctr.info(key)["window_ms"])  # type: ignore[index]


class ErrorsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT, protocol=3)
        self.ctr, self.pnc = Ctr(self.r), Pnc(self.r)

    def assert_raises(self, cls: type[redis_ctr.CtrError], call: Any, *args: Any, **kw: Any) -> None:
        with self.assertRaises(cls) as caught:
            call(*args, **kw)
        # Still a redis-py ResponseError, with the server's text.
        self.assertIsInstance(caught.exception, redis.exceptions.ResponseError)
        self.assertTrue(str(caught.exception))

    def test_each_module_error_has_its_class(self) -> None:
        ctr, k = self.ctr, fresh("err")
        ctr.add(k, 2**63 - 1)
        self.assert_raises(redis_ctr.CounterOverflow, ctr.add, k, 1)
        self.assert_raises(redis_ctr.BelowFloor, ctr.floor, fresh("f"), 5)
        self.assert_raises(redis_ctr.TokenTooOld, ctr.add, k, 0, token="t", at=1)
        future = int(time.time() * 1000) + 86_400_000
        self.assert_raises(redis_ctr.TooFarInFuture, ctr.add, k, 0, token="t", at=future)
        self.assert_raises(redis_ctr.TooFarInFuture, ctr.add, k, 0, at=future)
        self.assert_raises(redis_ctr.InvalidToken, ctr.add, k, 0, token="")
        self.assert_raises(redis_ctr.InvalidAmount, ctr.decrfloor, k, 0)
        self.assert_raises(redis_ctr.InvalidExpire, ctr.add, fresh("e"), 1, ex=0)
        self.assert_raises(redis_ctr.NotAnInteger, ctr.add, k, 2**63)
        self.assert_raises(redis_ctr.CtrSyntaxError, ctr.reconcile_from, k, "SET", "s", at=0)
        reused = fresh("reused")
        ctr.add(reused, 2, token="order-1")
        self.assert_raises(redis_ctr.TokenReused, ctr.add, reused, 3, token="order-1")
        self.r.set("plain-string", "x")
        self.assert_raises(redis_ctr.WrongType, ctr.get, "plain-string")
        self.assert_raises(redis_ctr.WrongType, self.pnc.get, k)
        self.assert_raises(redis_ctr.InvalidState, self.pnc.merge, fresh("m"), b"\x02\x00")
        # A holder of a floored spread before its first credit, asked once (Ctr.decrfloor would
        # ask again for its purchase_wait: test_spread).
        waiting = waiting_holder(self.r)
        once = redis_ctr._calls.decrfloor(waiting, 1)
        self.assert_raises(redis_ctr.BudgetInFlight, redis_ctr.client.run, self.r, once)
        self.assertEqual(ctr.get(k), 2**63 - 1)

    def test_bounds_increx_and_refunds(self) -> None:
        r = redis.Redis(port=PORT)
        ctr = Ctr(r)
        rl, stock = fresh("rl"), fresh("stock")
        self.assertEqual(ctr.increx(rl, ubound=2, ex=60, enx=True, token="a"), (1, 1))
        self.assertEqual(ctr.increx(rl, ubound=2, token="b"), redis_ctr.Increxed(2, 1))
        self.assertEqual(ctr.increx(rl, ubound=2, token="c").applied, 0)
        self.assertEqual(ctr.increx(rl, ubound=2, ex=60, enx=True, token="a"), (1, 1))
        self.assertEqual(ctr.increx(rl, 5, ubound=4, saturate=True), (4, 2))
        self.assertGreater(r.ttl(rl), 0)
        with self.assertRaises(redis_ctr.CtrSyntaxError):
            ctr.increx(rl, lbound=3, ubound=2)
        self.assertEqual(ctr.add(stock, 10), 10)
        self.assertIsNone(cast(object, ctr.ceil(stock, 10)))  # cast: None as a value, for mypy
        with self.assertRaises(redis_ctr.CeilingRefused):  # an AboveCeiling
            ctr.add(stock, 1)
        self.assertIsNone(ctr.add(stock, 1, refusable=True))
        with self.assertRaises(redis_ctr.AboveCeiling):
            ctr.ceil(stock, 9)
        self.assertEqual(ctr.decrfloor(stock, 4, token="o1"), 6)
        self.assertEqual(ctr.refund(stock, "o1"), 4)
        self.assertEqual(ctr.refund(stock, "o1"), 4)
        self.assertIsNone(ctr.refund(stock, "o2"))
        info = ctr.info(stock)
        assert info is not None
        self.assertEqual((info["value"], info["ceiling"]), (10, 10))
        pipe = ctr.pipeline()
        pipe.ceil(stock, None).increx(stock, 2).refund(stock, "o1")
        self.assertEqual(pipe.execute(), [None, (12, 2), 4])

    def test_limiter_errors(self) -> None:
        ctr = self.ctr
        self.assert_raises(redis_ctr.InvalidLimit, ctr.throttle, fresh("l"), -1, 1, 60)
        self.assert_raises(redis_ctr.InvalidLimit, ctr.throttle, fresh("l"), 1, 0, 60)
        self.assert_raises(redis_ctr.InvalidLimit, ctr.window, fresh("w"), 1000, buckets=3)
        counted = fresh("counted")
        ctr.add(counted, 1)
        self.assert_raises(redis_ctr.LimitRefused, ctr.throttle, counted, 1, 1, 60)
        windowed = fresh("windowed")
        ctr.window(windowed, 60_000)
        self.assert_raises(redis_ctr.LimitRefused, ctr.floor, windowed, 0)

    def test_reconcile_errors(self) -> None:
        ctr, k = self.ctr, fresh("rec")
        self.assert_raises(redis_ctr.HistoryMissing, ctr.reconcile, k, 1, at=watermark_ms())
        ctr.reconcile(k, 0)  # starts the bucket history
        time.sleep(0.25)
        w = watermark_ms()
        self.assertEqual(ctr.reconcile(k, 5, at=w).value, 5)
        self.assert_raises(redis_ctr.LateAdd, ctr.add, k, 1, at=w)
        self.assert_raises(redis_ctr.BadWatermark, ctr.reconcile, k, 5, at=w + 1)
        self.assertEqual(ctr.get(k), 5)

    def test_non_integers_raise_type_error_before_anything_is_sent(self) -> None:
        """Issue 26, finding 6: a float once poisoned a writer's whole sum (refused at the
        flush, 999 adds dropped with it). Every integer argument is checked at the call."""
        k = fresh("types")
        spread = fresh("types-spread")
        self.ctr.spread(spread, 4)
        sent_before = self.r.info("commandstats")
        bad: list[Any] = [0.5, 1.0, "1", b"1", True, None, decimal.Decimal(1), fractions.Fraction(1)]
        for value in bad:
            for key in (k, spread):
                # A Ctr with no holders cached: a check after the holder lookup would show
                # as a CTR.INFO sent.
                ctr = Ctr(self.r)
                calls: Any = [  # Any: the name is taken again by the counts below
                    lambda: ctr.add(key, value),
                    lambda: ctr.add(key, 1, at=value) if value is not None else 1 / 0,
                    lambda: ctr.add(key, 1, ex=value) if value is not None else 1 / 0,
                    lambda: ctr.add(key, 1, exat=value) if value is not None else 1 / 0,
                    lambda: ctr.add(key, 1, pxat=value, enx=True) if value is not None else 1 / 0,
                    lambda: ctr.decrfloor(key, value),
                    lambda: ctr.decrfloor(key, 1, at=value) if value is not None else 1 / 0,
                    lambda: ctr.floor(key, value) if value is not None else 1 / 0,
                    lambda: ctr.reconcile(key, value),
                    lambda: ctr.spread(key, value),
                    lambda: self.pnc.add(key, value),
                ]
                for call in calls:
                    with self.assertRaises((TypeError, ZeroDivisionError), msg=repr(value)) as e:
                        call()
                    if value is not None:
                        self.assertIsInstance(e.exception, TypeError)
        with redis_ctr.CoalescingWriter(self.r, flush_interval_ms=60_000) as writer:
            for _ in range(999):
                writer.add(k)
            for value in bad:
                with self.assertRaises(TypeError):
                    writer.add(k, value)
        self.assertEqual(writer.stats.adds, 999)
        self.assertEqual((writer.stats.flushed_sums, writer.stats.dropped), (1, 0))
        self.assertEqual(self.ctr.get(k), 999)
        # Nothing but the writer's one sum (and its holder lookup) reached the server.
        sent = self.r.info("commandstats")
        calls = {name: sent[name]["calls"] - sent_before.get(name, {"calls": 0})["calls"]
                 for name in sent if name.startswith("cmdstat_ctr") or name.startswith("cmdstat_pnc")}
        self.assertEqual({n: c for n, c in calls.items() if c},
                         {"cmdstat_ctr.add": 1, "cmdstat_ctr.holders": 1, "cmdstat_ctr.get": 1})
        # Integer types that say so are taken: bool is not one, an int subclass is.
        class Count(int):
            pass
        self.assertEqual(self.ctr.add(k, Count(1)), 1000)

    def test_errors_that_escaped_the_classes(self) -> None:
        """Issue 26, finding 8: these came out as plain ResponseErrors."""
        ctr, home = self.ctr, fresh("err-home")
        holders = ctr.spread(home, 3)
        self.assert_raises(redis_ctr.FlooredSpread, ctr.floor, home, 0)
        floored = fresh("err-floored")
        ctr.add(floored, 5)
        ctr.floor(floored, 2)
        self.assert_raises(redis_ctr.BelowFloor, ctr.clear, floored)
        self.assert_raises(redis_ctr.InvalidTime, ctr.add, fresh("err-at"), 1, at=-1)
        self.assert_raises(redis_ctr.UseHomeKey, ctr.clear, holders[1])
        self.assert_raises(redis_ctr.UseHomeKey, ctr.spread, holders[1], 2)
        self.assertEqual(ctr.get(floored), 5)

    def test_other_errors_stay_plain_response_errors(self) -> None:
        with self.assertRaises(redis.exceptions.ResponseError) as caught:
            redis_ctr.client.run(self.r, redis_ctr._calls.Call(("CTR.NOSUCH", "k"), int))
        self.assertNotIsInstance(caught.exception, redis_ctr.CtrError)
        self.assertIs(redis_ctr.errors.error_class(
            "ERR PNC.ADD must run on a primary: a replica has no replica id of its own"),
            redis_ctr.NotPrimary)
        self.assertIs(redis_ctr.errors.error_class(
            "ERR too many replica ids in one PN-counter (at most 1024)"),
            redis_ctr.TooManyReplicas)
        # TRYAGAIN errors: found with their code, and in redis-py's TryAgainError (which
        # strips it); both classes are TryAgainErrors too.
        tryagain = redis.exceptions.TryAgainError
        for text, cls in [
            ("budget in flight: spread counter holder 'h' waits for its share; retry the purchase",
             redis_ctr.BudgetInFlight),
            ("spread counter holder 'h' is moving between masters", redis_ctr.HolderMoving),
            ("add awaits a fold: this holder is being folded back into its home; retry the add "
             "with the same token", redis_ctr.AddAwaitsFold),
        ]:
            self.assertIs(redis_ctr.errors.error_class("TRYAGAIN " + text), cls)
            classified = redis_ctr.errors.classify(tryagain(text))
            self.assertIs(type(classified), cls)
            self.assertIsInstance(classified, tryagain)
            self.assertEqual(str(classified), text)


# The module's source, from this package's place in the repository.
MODULE_SRC = Path(__file__).resolve().parents[3] / "src"
# Error codes a Redis server replies with; a string literal starting with one and a space is an
# error text.
REDIS_ERROR_CODES = (
    "ERR|TRYAGAIN|WRONGTYPE|CLUSTERDOWN|BUSY|BUSYKEY|NOPERM|LOADING|READONLY|MASTERDOWN|"
    "CROSSSLOT|NOSCRIPT|EXECABORT|NOAUTH|MISCONF|OOM|NOREPLICAS|NOTBUSY|MOVED|ASK|UNBLOCKED"
)
ERROR_LITERAL = re.compile(r'"((?:%s) (?:[^"\\]|\\.)*)"' % REDIS_ERROR_CODES)
# An error of a command the module runs inside the server, passed on as that command replied,
# and the server's own redirection (redis-py raises MovedError for it).
PASSED_ON = {"ERR {e}", "MOVED {slot} {}:{}"}


def module_error_texts() -> Dict[str, str]:
    """Every error text in the module's source (outside tests and the separate binaries), as
    written (with its format placeholders), by where it is."""
    texts: Dict[str, str] = {}
    for path in sorted(MODULE_SRC.rglob("*.rs")):
        if "bin" in path.relative_to(MODULE_SRC).parts:
            continue
        source = path.read_text().split("#[cfg(test)]")[0]
        code = "\n".join(
            line for line in source.splitlines() if not line.lstrip().startswith("//")
        )
        code = re.sub(r"\\\n\s*", "", code)  # a literal continued on the next line
        for match in ERROR_LITERAL.finditer(code):
            texts[match.group(1)] = f"{path.relative_to(MODULE_SRC)}"
    return texts


def pexpiretime(r: Any, key: str) -> int:
    """The key's absolute expiry in unix ms; -1 without a TTL, -2 when missing."""
    return int(r.execute_command("PEXPIRETIME", key))


# Every option combination CTR.ADD refuses (ERR syntax error, or ENX without a time).
BAD_EXPIRY_OPTIONS: list[Dict[str, Any]] = [
    {"ex": 60, "px": 60_000},
    {"ex": 60, "exat": 4_000_000_000},
    {"px": 60_000, "pxat": 4_000_000_000_000},
    {"exat": 4_000_000_000, "pxat": 4_000_000_000_000},
    {"ex": 60, "persist": True},
    {"pxat": 4_000_000_000_000, "persist": True},
    {"ex": 60, "px": 60_000, "enx": True},
    {"enx": True},
    {"persist": True, "enx": True},
]


class AddExpiryTest(unittest.TestCase):
    """``Ctr.add``'s expiry options: ``ex``/``px``/``exat``/``pxat`` on create, ``enx`` on an
    existing key without a TTL, ``persist``; the combinations the module refuses raise before
    anything is sent."""

    def setUp(self) -> None:
        self.r = redis.Redis(port=PORT, protocol=3)
        self.ctr = Ctr(self.r)

    def test_each_form_sets_the_ttl_it_names_on_create(self) -> None:
        ctr, r = self.ctr, self.r
        now_ms = int(time.time() * 1000)
        ex, px, exat, pxat = fresh("ex"), fresh("px"), fresh("exat"), fresh("pxat")
        self.assertEqual(ctr.add(ex, 1, ex=60), 1)
        self.assertTrue(59_000 < r.pttl(ex) <= 60_000, r.pttl(ex))
        self.assertEqual(ctr.add(px, 1, px=90_000), 1)
        self.assertTrue(89_000 < r.pttl(px) <= 90_000, r.pttl(px))
        at_s = now_ms // 1000 + 120
        self.assertEqual(ctr.add(exat, 1, exat=at_s), 1)
        self.assertEqual(pexpiretime(r, exat), at_s * 1000)
        at_ms = now_ms + 150_123
        self.assertEqual(ctr.add(pxat, 1, pxat=at_ms, token="t", at=now_ms), 1)
        self.assertEqual(pexpiretime(r, pxat), at_ms)
        # Without ENX, on an existing key: the TTL it has is kept, none is given to one without.
        self.assertEqual(ctr.add(pxat, 1, pxat=at_ms + 60_000), 2)
        self.assertEqual(pexpiretime(r, pxat), at_ms)
        plain = fresh("plain")
        ctr.add(plain, 1)
        self.assertEqual(ctr.add(plain, 1, exat=at_s), 2)
        self.assertEqual(r.pttl(plain), -1)
        # A time already past: the add replies, and the key is gone.
        past = fresh("past")
        self.assertEqual(ctr.add(past, 5, pxat=now_ms - 1000), 5)
        self.assertEqual(r.exists(past), 0)
        # Not positive: refused by the module, nothing created.
        with self.assertRaises(redis_ctr.InvalidExpire):
            ctr.add(past, 1, exat=0)
        self.assertEqual(r.exists(past), 0)

    def test_enx_sets_a_ttl_only_on_a_key_without_one(self) -> None:
        ctr, r = self.ctr, self.r
        now_ms = int(time.time() * 1000)
        window = fresh("window")
        self.assertEqual(ctr.add(window, 1), 1)  # written once without a TTL
        self.assertEqual(r.pttl(window), -1)
        self.assertEqual(ctr.add(window, 1, ex=60, enx=True), 2)  # repaired
        self.assertTrue(59_000 < r.pttl(window) <= 60_000, r.pttl(window))
        kept = pexpiretime(r, window)
        options: Any  # keywords of an add, passed on with **
        for options in ({"ex": 5}, {"px": 5_000}, {"exat": now_ms // 1000 + 600},
                        {"pxat": now_ms + 600_000}):
            ctr.add(window, 1, enx=True, **options)
            self.assertEqual(pexpiretime(r, window), kept, options)  # never changed
        self.assertEqual(ctr.get(window), 6)
        for form, options in (("exat", {"exat": now_ms // 1000 + 300}),
                              ("pxat", {"pxat": now_ms + 300_456})):
            key = fresh(form)
            ctr.add(key, 1)
            ctr.add(key, 1, enx=True, **options)
            expected = options.get("pxat", options.get("exat", 0) * 1000)
            self.assertEqual(pexpiretime(r, key), expected, form)
        created = fresh("created")
        self.assertEqual(ctr.add(created, 1, px=70_000, enx=True), 1)
        self.assertTrue(69_000 < r.pttl(created) <= 70_000, r.pttl(created))

    def test_persist_removes_the_ttl(self) -> None:
        ctr, r = self.ctr, self.r
        key = fresh("persist")
        ctr.add(key, 1, ex=60)
        self.assertGreater(r.pttl(key), 0)
        self.assertEqual(ctr.add(key, 2, persist=True), 3)
        self.assertEqual(r.pttl(key), -1)
        self.assertEqual(ctr.add(key, 1, persist=True), 4)  # none to remove
        self.assertEqual(r.pttl(key), -1)
        created = fresh("persist-created")
        self.assertEqual(ctr.add(created, 1, persist=True), 1)
        self.assertEqual(r.pttl(created), -1)
        # Queued on a pipeline too.
        pipe = ctr.pipeline()
        pipe.add(key, 1, pxat=int(time.time() * 1000) + 60_000, enx=True).add(key, 1)
        self.assertEqual(pipe.execute(), [5, 6])
        self.assertGreater(r.pttl(key), 0)
        self.assertEqual(ctr.pipeline().add(key, 1, persist=True).execute(), [7])
        self.assertEqual(r.pttl(key), -1)

    def test_refused_combinations_raise_before_anything_is_sent(self) -> None:
        key, spread = fresh("bad-expiry"), fresh("bad-expiry-spread")
        self.ctr.spread(spread, 4)
        sent_before = self.r.info("commandstats")
        for options in BAD_EXPIRY_OPTIONS:
            for target in (key, spread):
                ctr = Ctr(self.r)  # no holders cached: a lookup would show as CTR.HOLDERS
                with self.assertRaises(ValueError, msg=repr(options)):
                    ctr.add(target, 1, **options)
                with self.assertRaises(ValueError, msg=repr(options)):
                    ctr.add(target, 1, token="t", refusable=True, **options)
            pipe = self.ctr.pipeline()
            with self.assertRaises(ValueError, msg=repr(options)):
                pipe.add(key, 1, **options)
            self.assertEqual(len(pipe), 0)
        value: Any  # not an int, on purpose
        for value in (0.5, "60", True):
            with self.assertRaises(TypeError, msg=repr(value)):
                self.ctr.add(key, 1, exat=value)
            with self.assertRaises(TypeError, msg=repr(value)):
                self.ctr.add(key, 1, pxat=value, enx=True)
        sent = self.r.info("commandstats")
        calls = {name: sent[name]["calls"] - sent_before.get(name, {"calls": 0})["calls"]
                 for name in sent if name.startswith("cmdstat_ctr")}
        self.assertEqual({n: c for n, c in calls.items() if c}, {})
        self.assertEqual(self.r.exists(key), 0)


class ErrorTableTest(unittest.TestCase):
    def test_every_module_error_text_has_its_class(self) -> None:
        """The one table (redis_ctr.errors.ERROR_TABLE) against the module's own error texts: a
        new error in the module that no entry matches fails here."""
        texts = module_error_texts()
        self.assertGreater(len(texts), 40, "the module's error texts were found")
        unmapped = []
        for text, where in texts.items():
            if text in PASSED_ON:
                continue
            sample = re.sub(r"\{[^{}]*\}", "x", text)  # each placeholder filled
            cls = redis_ctr.errors.error_class(sample)
            if cls is None:
                unmapped.append(f"{where}: {text}")
                continue
            self.assertIn(cls.__name__, redis_ctr.__all__)
            # As redis-py gives it: without the ERR code it strips.
            if sample.startswith("ERR "):
                self.assertIs(redis_ctr.errors.error_class(sample[4:]), cls, text)
        self.assertEqual(unmapped, [])

    def test_every_error_class_is_documented(self) -> None:
        readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
        classes = [
            name for name in redis_ctr.__all__
            if isinstance(getattr(redis_ctr, name), type)
            and issubclass(getattr(redis_ctr, name), redis_ctr.CtrError)
            and name != "CtrError"
        ]
        table_classes = {cls.__name__ for _, cls in redis_ctr.errors.ERROR_TABLE}
        # The library's own reading of a reply that is not an error (a floor's nil).
        library_only = {"FloorRefused", "CeilingRefused"}
        self.assertEqual(set(classes), table_classes | library_only)
        for name in classes:
            self.assertTrue(f"| `{name}` |" in readme, f"{name} is not in the README's table")


if __name__ == "__main__":
    unittest.main()
