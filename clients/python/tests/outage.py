"""One master of three down or frozen (issue 26, finding 2): writers keep writing the healthy
holders.

Run by tests/client_python.rs, each test on a 3-master cluster of its own (REDIS_CLUSTER_PORT):
``MasterDownTest`` shuts master REDIS_DOWN_PORT down (its replica REDIS_REPLICA_PORT takes over);
``MasterFrozenTest`` freezes master REDIS_FROZEN_PORT (SIGSTOP of REDIS_FROZEN_PID, a server the
Rust test started) and wakes it (SIGCONT). Not part of the suite's discovery (its name does not
start with ``test``): it needs those clusters.

A spread counter with holders on every master and its home elsewhere is written through
``Ctr.add`` (plain and tokened adds, alternating) and through a ``CoalescingWriter`` (one
flushed sum per add, so its rate is the rate of sums reaching the server). Each rate is
measured while healthy, then with the master shut down before its replica takes over (the
cluster's node timeout is 15 s; a measurement takes 3 s and none starts after 8 s, so that the
cluster still serves the healthy masters: past the timeout, with the default full coverage,
every node refuses every key until the replica takes over, which the test then forces with
``CLUSTER FAILOVER FORCE``): each keeps at least half, measured
against a control (adds to a counter on a master that stays up) taken in turn with them. Once the
replica is master, the total is every acknowledged add: nothing lost, nothing twice. The frozen
master's test does the same with the sync classes and with their asyncio twins (``AsyncCtr.add``,
``AsyncCoalescingWriter``), each with the master frozen for about 6 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import unittest
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

import redis_ctr
from redis_ctr.asyncio import AsyncCoalescingWriter, AsyncCtr

from ._typed import command, node_of
from .servers import fresh

CLUSTER_PORT = int(os.environ.get("REDIS_CLUSTER_PORT", "0"))
DOWN_PORT = int(os.environ.get("REDIS_DOWN_PORT", "0"))
REPLICA_PORT = int(os.environ.get("REDIS_REPLICA_PORT", "0"))
FROZEN_PORT = int(os.environ.get("REDIS_FROZEN_PORT", "0"))
FROZEN_PID = int(os.environ.get("REDIS_FROZEN_PID", "0"))
# How long a client waits for a reply: a frozen master is noticed only so.
SOCKET_TIMEOUT = 0.25
# Rounds measured while a master is frozen: 6 s in all, so that noticing the freeze (a socket
# timeout or two, and redis-py's slot map refresh after each) is a small part of it.
FROZEN_CYCLES = 10
WINDOW = 0.2
CYCLES = 5


def rate(step: Callable[[int], object], seconds: float) -> int:
    """How many ``step`` calls completed in ``seconds`` (any error fails the test)."""
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step(done)
        done += 1
    return done


def relative_rates(steps: Sequence[Callable[[int], object]], cycles: int = CYCLES) -> List[float]:
    """The rate of each step relative to the last one (the control), in ``cycles`` rounds of
    ``WINDOW`` seconds each, taken in turn: a machine shared with other work slows them
    alike, so the ratios hold where raw rates would not."""
    totals = [0] * len(steps)
    for _ in range(cycles):
        for i, step in enumerate(steps):
            totals[i] += rate(step, WINDOW)
    return [t / totals[-1] for t in totals]


def key_not_on(rc: Any, port: int, prefix: str) -> str:
    """A fresh key whose slot ``port`` does not serve."""
    key = fresh(prefix)
    while rc.get_node_from_key(key).port == port:
        key = fresh(prefix)
    return key


@unittest.skipUnless(DOWN_PORT, "run by tests/client_python.rs with a master to shut down")
class MasterDownTest(unittest.TestCase):
    def test_adds_and_the_writer_keep_half_their_rate_with_a_master_down(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(rc.close)
        key = fresh("outage")
        while node_of(rc, key).port == DOWN_PORT:
            key = fresh("outage")
        ctr = redis_ctr.Ctr(rc)
        holders = ctr.spread(key, 16)
        on_down = [h for h in holders if node_of(rc, h).port == DOWN_PORT]
        self.assertGreater(len(on_down), 2, "holders on the master shut down")
        writer = redis_ctr.CoalescingWriter(rc, flush_interval_ms=60_000)
        self.addCleanup(writer.close)
        # The control: plain adds to a counter on a master that stays up, through a client of
        # its own (redis-py's reaction to the outage, slot map refreshes, is the writers' cost).
        control_client = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(control_client.close)
        control_key = fresh("control")
        while node_of(control_client, control_key).port == DOWN_PORT:
            control_key = fresh("control")
        control = redis_ctr.Ctr(control_client, spread_refresh_ms=None)
        acknowledged = 0
        # Tokened adds whose holder's master is down: refused (nothing sent, or a connection
        # that failed), retried with their tokens once the replica has taken over.
        refused_tokens: List[str] = []

        def add(i: int) -> None:
            nonlocal acknowledged
            if i % 2:
                token = f"{key}:{time.monotonic_ns()}"
                try:
                    ctr.add(key, 1, token=token)
                except redis.ConnectionError:  # HolderAway too
                    refused_tokens.append(token)
                    return
            else:
                ctr.add(key, 1)
            acknowledged += 1

        def write(_: int) -> None:
            writer.add(key)
            writer.flush()  # one sum per add: the rate of sums reaching the server

        def control_add(_: int) -> None:
            control.add(control_key, 1)

        healthy = relative_rates([add, write, control_add])
        self.assertEqual(refused_tokens, [])
        down = redis.Redis(host="127.0.0.1", port=DOWN_PORT)
        try:
            command(down, "SHUTDOWN", "NOSAVE")
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        down.close()
        shut_down = time.monotonic()

        def kept(outage: List[float]) -> bool:
            return outage[0] >= healthy[0] / 2 and outage[1] >= healthy[1] / 2

        # Rates on a shared machine move with scheduling: up to three measurements, the first
        # that keeps half of both rates is taken (a client that held every add back behind the
        # master down would fail all three; none starts after 8 s).
        outage = relative_rates([add, write, control_add])
        while not kept(outage) and time.monotonic() - shut_down < 8:
            outage = relative_rates([add, write, control_add])
        rates = (
            f"relative to the control: Ctr.add {healthy[0]:.2f} -> {outage[0]:.2f}, "
            f"writer sums {healthy[1]:.2f} -> {outage[1]:.2f}; "
            f"{len(refused_tokens)} tokened adds refused"
        )
        print(rates)
        self.assertGreaterEqual(outage[0], healthy[0] / 2, rates)
        self.assertGreaterEqual(outage[1], healthy[1] / 2, rates)

        # The replica takes over; nothing acknowledged is lost.
        replica = redis.Redis(host="127.0.0.1", port=REPLICA_PORT, decode_responses=True)
        self.addCleanup(replica.close)
        command(replica, "CLUSTER", "FAILOVER", "FORCE")
        deadline = time.monotonic() + 60
        while command(replica, "ROLE")[0] != "master":
            self.assertLess(time.monotonic(), deadline, "the replica never took over")
            time.sleep(0.1)
        while command(replica, "CLUSTER INFO").get("cluster_state") != "ok":
            self.assertLess(time.monotonic(), deadline, "the cluster never came back")
            time.sleep(0.1)
        rate(add, 0.5)
        # The refused tokens, retried: each counts once, on its token's holder.
        deadline = time.monotonic() + 60
        for token in refused_tokens:
            while True:
                try:
                    ctr.add(key, 1, token=token)
                    break
                except redis.ConnectionError:
                    self.assertLess(time.monotonic(), deadline, "a refused add never got through")
                    time.sleep(0.2)
            acknowledged += 1
        writer.close()
        self.assertEqual(writer.stats.dropped, 0)
        expected = acknowledged + writer.stats.adds
        deadline = time.monotonic() + 30
        while True:
            try:
                total = redis_ctr.Ctr(rc).get(key)
                break
            except (redis_ctr.SpreadUnavailable, redis.exceptions.ClusterError,
                    redis.ConnectionError):
                # The other masters may not see the new master for a moment.
                self.assertLess(time.monotonic(), deadline, "the total never came back")
                time.sleep(0.2)
        self.assertEqual(total, expected, rates)


@dataclass
class Writes:
    """What the frozen-master test drives, as plain calls (an asyncio client's run to completion
    on its event loop, its control alike, so that the ratios compare like with like)."""

    add: Callable[[Optional[str]], object]
    """One add of 1 to the spread counter, with the token given (or none)."""
    write: Callable[[], None]
    """One add of 1 to the writer."""
    flush: Callable[[], None]
    close: Callable[[], None]
    stats: Callable[[], redis_ctr.WriterStats]
    control: Callable[[], object]
    """One add to the control counter, on a master that stays up."""
    total: Callable[[], int]


@unittest.skipUnless(FROZEN_PID, "run by tests/client_python.rs with a master to freeze")
class MasterFrozenTest(unittest.TestCase):
    """A frozen master accepts connections and answers nothing: a client notices it only by
    its socket timeout, and a write whose reply timed out may still count (the master runs what
    it read once it wakes). ``add`` raises such a write's ``TimeoutError`` (maybe counted, as a
    lost reply) and leaves that master's holders out for a while; the writer holds back the sum
    it sent there (same token and holder) and sends the others on. Each test freezes the master
    for about 6 s, less than the cluster's node timeout (15 s): nothing fails over."""

    def test_adds_and_the_writer_keep_half_their_rate_with_a_master_frozen(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT, socket_timeout=SOCKET_TIMEOUT)
        self.addCleanup(rc.close)
        key = key_not_on(rc, FROZEN_PORT, "frozen")
        ctr = redis_ctr.Ctr(rc)
        self.assert_holders_on_the_frozen(rc, ctr.spread(key, 16))
        writer = redis_ctr.CoalescingWriter(rc, flush_interval_ms=60_000)
        self.addCleanup(writer.close)
        control_client = RedisCluster(
            host="127.0.0.1", port=CLUSTER_PORT, socket_timeout=SOCKET_TIMEOUT
        )
        self.addCleanup(control_client.close)
        control_key = key_not_on(control_client, FROZEN_PORT, "control")
        control = redis_ctr.Ctr(control_client, spread_refresh_ms=None)
        self.check_frozen(
            "Ctr.add and CoalescingWriter",
            key,
            Writes(
                add=lambda token: ctr.add(key, 1, token=token),
                write=lambda: writer.add(key),
                flush=writer.flush,
                close=writer.close,
                stats=lambda: writer.stats,
                control=lambda: control.add(control_key, 1),
                total=lambda: ctr.get(key),
            ),
        )

    def test_asyncio_adds_and_writer_keep_half_their_rate_with_a_master_frozen(self) -> None:
        """The same with ``AsyncCtr.add`` and the ``AsyncCoalescingWriter`` on
        ``redis.asyncio.RedisCluster``."""
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)
        run = loop.run_until_complete

        def cluster() -> AsyncRedisCluster:
            client = AsyncRedisCluster(
                host="127.0.0.1", port=CLUSTER_PORT, socket_timeout=SOCKET_TIMEOUT
            )
            run(client.initialize())
            self.addCleanup(lambda: run(client.aclose()))
            return client

        rc = cluster()
        key = key_not_on(rc, FROZEN_PORT, "frozen")
        ctr = AsyncCtr(rc)
        self.assert_holders_on_the_frozen(rc, run(ctr.spread(key, 16)))
        writer = AsyncCoalescingWriter(rc, flush_interval_ms=60_000)
        self.addCleanup(lambda: run(writer.close()))
        control_client = cluster()
        control_key = key_not_on(control_client, FROZEN_PORT, "control")
        control = AsyncCtr(control_client, spread_refresh_ms=None)
        self.check_frozen(
            "AsyncCtr.add and AsyncCoalescingWriter",
            key,
            Writes(
                add=lambda token: run(ctr.add(key, 1, token=token)),
                write=lambda: run(writer.add(key)),
                flush=lambda: run(writer.flush()),
                close=lambda: run(writer.close()),
                stats=lambda: writer.stats,
                control=lambda: run(control.add(control_key, 1)),
                total=lambda: run(ctr.get(key)),
            ),
        )

    def assert_holders_on_the_frozen(self, rc: Any, holders: Sequence[str]) -> None:
        on_frozen = [h for h in holders if rc.get_node_from_key(h).port == FROZEN_PORT]
        self.assertGreater(len(on_frozen), 2, "holders on the master frozen")

    def check_frozen(self, what: str, key: str, writes: Writes) -> None:
        """The rates of ``writes`` (``what`` they are) healthy and with the master frozen, then
        the total once it wakes."""
        acknowledged = 0
        timed_out_plain = 0  # sent once each: maybe counted (as a lost reply)
        timed_out_tokens: List[str] = []  # retried with their tokens once it wakes
        unsent_tokens: List[str] = []  # their holder left out: refused unsent, retried too
        held_flushes = 0

        def add(i: int) -> None:
            nonlocal acknowledged, timed_out_plain
            token = f"{key}:{time.monotonic_ns()}" if i % 2 else None
            try:
                writes.add(token)
                acknowledged += 1
            except redis_ctr.HolderAway:
                assert token is not None, "an untokened add goes to a holder in reach"
                unsent_tokens.append(token)
            except redis.TimeoutError:
                if token is None:
                    timed_out_plain += 1
                else:
                    timed_out_tokens.append(token)

        def write(_: int) -> None:
            nonlocal held_flushes
            writes.write()
            try:
                writes.flush()  # one sum per add: the rate of sums reaching the server
            except redis.TimeoutError:
                held_flushes += 1  # a sum held back for the frozen master; the others went

        steps = [add, write, lambda _: writes.control()]
        healthy = relative_rates(steps, FROZEN_CYCLES)
        frozen_at = time.monotonic()
        os.kill(FROZEN_PID, signal.SIGSTOP)
        try:
            outage = relative_rates(steps, FROZEN_CYCLES)
        finally:
            os.kill(FROZEN_PID, signal.SIGCONT)
        frozen_for = time.monotonic() - frozen_at
        rates = (
            f"{what}, relative to the control: add {healthy[0]:.2f} -> {outage[0]:.2f}, "
            f"writer sums {healthy[1]:.2f} -> {outage[1]:.2f}; frozen {frozen_for:.1f} s, "
            f"{timed_out_plain} plain and {len(timed_out_tokens)} tokened adds timed out, "
            f"{len(unsent_tokens)} tokened adds refused unsent, "
            f"{held_flushes} flushes held a sum back"
        )
        print(rates)
        self.assertLess(frozen_for, 12, "frozen close to the node timeout: " + rates)
        self.assertGreater(timed_out_plain + len(timed_out_tokens) + held_flushes, 0, rates)
        self.assertGreaterEqual(outage[0], healthy[0] / 2, rates)
        self.assertGreaterEqual(outage[1], healthy[1] / 2, rates)

        # Awake: the tokened adds that timed out or were refused unsent are retried (each
        # counts once, on its token's holder, which refuses them until its leave-out ends), the
        # held sums are flushed; nothing is lost, nothing counted twice.
        deadline = time.monotonic() + 60
        for token in timed_out_tokens + unsent_tokens:
            while True:
                try:
                    writes.add(token)
                    break
                except (redis.TimeoutError, redis_ctr.HolderAway):
                    self.assertLess(time.monotonic(), deadline, "a retry never got through")
                    time.sleep(0.2)
            acknowledged += 1
        while True:
            try:
                writes.flush()
                break
            except redis.TimeoutError:
                self.assertLess(time.monotonic(), deadline, "a held sum never got through")
                time.sleep(0.2)
        writes.close()
        self.assertEqual(writes.stats().dropped, 0)
        # Every acknowledged add and every add of the writer counts exactly once; a plain add
        # whose reply timed out counts at most once (sent once: redis-py's retries are off for
        # holder writes; whether a frozen server runs what it had read before the client gave
        # up varies, measured with INCR: 1 of 3).
        counted = acknowledged + writes.stats().adds
        total = writes.total()
        self.assertGreaterEqual(total, counted, rates)
        self.assertLessEqual(total, counted + timed_out_plain, rates)


if __name__ == "__main__":
    unittest.main()
