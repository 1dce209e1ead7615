"""One master of three down (issue 26, finding 2): writers keep writing the healthy holders.

Run by tests/client_python.rs on a 3-master cluster of its own (REDIS_CLUSTER_PORT) whose master
REDIS_DOWN_PORT has a replica (REDIS_REPLICA_PORT); this test shuts that master down. Not part
of the suite's discovery (its name does not start with ``test``): it needs that cluster.

A spread counter with holders on every master and its home elsewhere is written through
``Ctr.add`` (plain and tokened adds, alternating) and through a ``CoalescingWriter`` (one
flushed sum per add, so its rate is the rate of sums reaching the server). Each rate is
measured while healthy, then with the master shut down before its replica takes over (the
cluster's node timeout is 5 s; the measurements take 3 s): each keeps at least half, measured
against a control (adds to a counter on a master that stays up) taken in turn with them. Once the
replica is master, the total is every acknowledged add: nothing lost, nothing twice.
"""

from __future__ import annotations

import os
import time
import unittest
from typing import Callable, List, Sequence

import redis
from redis.cluster import RedisCluster

import redis_ctr

from .servers import fresh

CLUSTER_PORT = int(os.environ.get("REDIS_CLUSTER_PORT", "0"))
DOWN_PORT = int(os.environ.get("REDIS_DOWN_PORT", "0"))
REPLICA_PORT = int(os.environ.get("REDIS_REPLICA_PORT", "0"))
WINDOW = 0.2
CYCLES = 5


def rate(step: Callable[[int], None], seconds: float) -> int:
    """How many ``step`` calls completed in ``seconds`` (any error fails the test)."""
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step(done)
        done += 1
    return done


def relative_rates(steps: Sequence[Callable[[int], None]]) -> List[float]:
    """The rate of each step relative to the last one (the control), in ``CYCLES`` rounds of
    ``WINDOW`` seconds each, taken in turn: a machine shared with other work slows them
    alike, so the ratios hold where raw rates would not."""
    totals = [0] * len(steps)
    for _ in range(CYCLES):
        for i, step in enumerate(steps):
            totals[i] += rate(step, WINDOW)
    return [t / totals[-1] for t in totals]


class MasterDownTest(unittest.TestCase):
    def test_adds_and_the_writer_keep_half_their_rate_with_a_master_down(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(rc.close)
        key = fresh("outage")
        while rc.get_node_from_key(key).port == DOWN_PORT:
            key = fresh("outage")
        ctr = redis_ctr.Ctr(rc)
        holders = ctr.spread(key, 16)
        on_down = [h for h in holders if rc.get_node_from_key(h).port == DOWN_PORT]
        self.assertGreater(len(on_down), 2, "holders on the master shut down")
        writer = redis_ctr.CoalescingWriter(rc, flush_interval_ms=60_000)
        self.addCleanup(writer.close)
        # The control: plain adds to a counter on a master that stays up, through a client of
        # its own (redis-py's reaction to the outage, slot map refreshes, is the writers' cost).
        control_client = RedisCluster(host="127.0.0.1", port=CLUSTER_PORT)
        self.addCleanup(control_client.close)
        control_key = fresh("control")
        while control_client.get_node_from_key(control_key).port == DOWN_PORT:
            control_key = fresh("control")
        control = redis_ctr.Ctr(control_client, spread_refresh_ms=None)
        acknowledged = 0

        def add(i: int) -> None:
            nonlocal acknowledged
            if i % 2:
                ctr.add(key, 1, token=f"{key}:{time.monotonic_ns()}")
            else:
                ctr.add(key, 1)
            acknowledged += 1

        def write(_: int) -> None:
            writer.add(key)
            writer.flush()  # one sum per add: the rate of sums reaching the server

        def control_add(_: int) -> None:
            control.add(control_key, 1)

        healthy = relative_rates([add, write, control_add])
        down = redis.Redis(host="127.0.0.1", port=DOWN_PORT)
        try:
            down.execute_command("SHUTDOWN", "NOSAVE")
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        down.close()
        outage = relative_rates([add, write, control_add])
        rates = (
            f"relative to the control: Ctr.add {healthy[0]:.2f} -> {outage[0]:.2f}, "
            f"writer sums {healthy[1]:.2f} -> {outage[1]:.2f}"
        )
        print(rates)
        self.assertGreaterEqual(outage[0], healthy[0] / 2, rates)
        self.assertGreaterEqual(outage[1], healthy[1] / 2, rates)

        # The replica takes over; nothing acknowledged is lost.
        replica = redis.Redis(host="127.0.0.1", port=REPLICA_PORT, decode_responses=True)
        self.addCleanup(replica.close)
        deadline = time.monotonic() + 60
        while replica.execute_command("ROLE")[0] != "master":
            self.assertLess(time.monotonic(), deadline, "the replica never took over")
            time.sleep(0.1)
        while replica.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
            self.assertLess(time.monotonic(), deadline, "the cluster never came back")
            time.sleep(0.1)
        rate(add, 0.5)
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


if __name__ == "__main__":
    unittest.main()
