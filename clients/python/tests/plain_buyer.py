"""A flash sale bought by plain redis-py: each buyer its own ``redis.cluster.RedisCluster`` with
redis-py's default retries, none of this library's classes, the probe rule of docs/CLUSTER.md
walked by hand over ``CTR.HOLDERS home AT x`` (only the order of visits is this library's, the
documented rule). A floored counter of ``stock`` units (floor 0) is spread over ``holders``
holders and the buyers start as ``CTR.SPREAD`` replies, while every share still travels to its
holder: a holder waiting for its share holds the purchase in the server
(``ctr.purchase-wait-ms``), so a plain client is never told ``TRYAGAIN`` often enough for
redis-py to give up (``ClusterError: TTL exhausted``) in a healthy cluster (item 9 of the
spread issue).

The sale stands for a client that stores its order time with each token: every purchase and
retry is dated at the sale's start ``x`` (a time past the spread) and walks the holders in force
then, ``CTR.HOLDERS home AT x``, sending ``CTR.DECRFLOOR holder 1 TOKEN t AT x``, so that a
retry walks the same holders even if the counter grew or shrank meanwhile. A holder folded back
by a shrink answers a token it never saw with the folded-back error: a refusal (it never grants
again), and the walk goes on.

Used by ``test_cluster.py`` and, as a command, by bench/floor_spread.sh:

    python -m tests.plain_buyer SEED_PORT KEY STOCK HOLDERS BUYERS RETRY_PERCENT

prints one line (purchases, units granted, refusals, false refusals, retries replayed, the
``TTL exhausted`` and other errors, units left, seconds from the spread's reply) and exits non-zero on an oversell or a
retry answered differently.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, RedisError, ResponseError

from redis_ctr._spread import probe_order

from ._typed import command, node_of


MAX_ASKS = 50


@dataclass
class Tally:
    """What the buyers counted (under ``lock``)."""

    purchases: int = 0
    granted: int = 0
    refused: int = 0
    false_refused: int = 0
    retried: int = 0
    retries_differing: int = 0
    ttl_exhausted: int = 0
    other_errors: List[str] = field(default_factory=list)
    sold_out: bool = False
    left: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


START_MARGIN_MS = 20
"""How far past the home master's ``TIME`` the sale's start is put: the spread is dated a
millisecond past the module's clock, which may lag ``TIME`` by a tick (up to 10 ms), so the list
at that start holds the spread's holders."""


def list_at_start(master: redis.Redis, home: str) -> Tuple[int, List[str]]:
    """The sale's start ``x`` and the holders in force then, ``CTR.HOLDERS home AT x``, asked
    again while the home answers that ``x`` is ahead of its clock (its holders then are not
    decided yet)."""
    seconds, micros = master.time()
    x = seconds * 1000 + micros // 1000 + START_MARGIN_MS
    deadline = time.monotonic() + 5
    while True:
        try:
            return x, list(command(master, "CTR.HOLDERS", home, "AT", x))
        except ResponseError as e:
            if "ahead of the home's clock" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def walk(rc: RedisCluster, holders: List[str], token: str, at: int, tally: Tally) -> Optional[int]:
    """One purchase of 1 unit by the probe rule: the holders (in force at ``at``) in the
    token's order, stopping at the first grant; a failing holder (an error) is asked again with
    the same token, never skipped (skipping it would let a retry be decided afresh there).
    None: every holder refused."""
    for index in probe_order(token, len(holders)):
        reply = ask(rc, holders[index], token, at, tally)
        if reply is not None:
            return int(reply)
    return None


def ask(rc: RedisCluster, holder: str, token: str, at: int, tally: Tally) -> Optional[int]:
    """``CTR.DECRFLOOR holder 1 TOKEN token AT at``, asked again after an error (at most
    ``MAX_ASKS`` times: then the error is raised). A holder folded back: a refusal."""
    for _ in range(MAX_ASKS):
        try:
            return cast(
                Optional[int], command(rc, "CTR.DECRFLOOR", holder, 1, "TOKEN", token, "AT", at)
            )
        except ClusterError:  # redis-py gave up after its own retries of TRYAGAIN
            with tally.lock:
                tally.ttl_exhausted += 1
        except ResponseError as e:
            if "folded back" in str(e):
                return None  # nothing counted there, and it never grants again
            with tally.lock:
                tally.other_errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.01)
        except RedisError as e:
            with tally.lock:
                tally.other_errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.01)
    raise RuntimeError(f"{holder} failed {MAX_ASKS} times in a row for {token}")


def buyer(
    rc: RedisCluster, home: str, holders: List[str], at: int, name: str, retry: int, tally: Tally
) -> None:
    """Buys 1 unit at a time until a walk is refused with nothing left; ``retry`` percent of the
    purchases are sent again with their token and must be answered the same."""
    n = 0
    while not tally.sold_out:
        n += 1
        token = f"{name}:{n}"
        first = walk(rc, holders, token, at, tally)
        resent = random.randrange(100) < retry
        again = walk(rc, holders, token, at, tally) if resent else first
        # A refusal is false when the counter still shows a unit right after it.
        left = int(command(rc, "CTR.GET", home)) if first is None else 0
        with tally.lock:
            tally.purchases += 1
            tally.retried += resent
            tally.retries_differing += again != first
            if first is not None:
                tally.granted += 1
            elif left > 0:
                tally.refused += 1
                tally.false_refused += 1
            else:
                tally.refused += 1
                tally.sold_out = True


def sale(
    port: int,
    home: str,
    stock: int,
    holders: int,
    buyers: int,
    retry: int,
    hold_shares_ms: int = 0,
) -> Tally:
    """Spreads ``stock`` units of ``home`` (floor 0) over ``holders`` holders and sells them to
    ``buyers`` threads, each with its own client, from the moment ``CTR.SPREAD`` replies. With
    ``hold_shares_ms``, the home's master sends no share for that long (``CLIENT PAUSE ...
    WRITE`` run right after the spread, in the same read: the module sends nothing while
    writes are paused), as a slow replica or link would hold them."""
    admin = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)
    clients = [RedisCluster(host="127.0.0.1", port=port) for _ in range(buyers)]
    try:
        command(admin, "CTR.ADD", home, stock)
        command(admin, "CTR.FLOOR", home, 0)
        node = node_of(admin, home)
        with redis.Redis(host=node.host, port=node.port, decode_responses=True) as master:
            pipe = master.pipeline(transaction=False)
            pipe.execute_command("CTR.SPREAD", home, holders)
            if hold_shares_ms:
                pipe.execute_command("CLIENT", "PAUSE", hold_shares_ms, "WRITE")
            pipe.execute()
            at, names = list_at_start(master, home)
        started = time.monotonic()
        tally = Tally()
        threads = [
            threading.Thread(
                target=buyer, args=(rc, home, names, at, f"{home}:b{b}", retry, tally)
            )
            for b, rc in enumerate(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tally.seconds = time.monotonic() - started
        tally.left = int(command(admin, "CTR.GET", home))
        return tally
    finally:
        admin.close()
        for rc in clients:
            rc.close()


def main(argv: List[str]) -> int:
    if len(argv) != 7:
        print(
            "usage: python -m tests.plain_buyer SEED_PORT KEY STOCK HOLDERS BUYERS RETRY_PERCENT",
            file=sys.stderr,
        )
        return 2
    port, key = int(argv[1]), argv[2]
    stock, holders, buyers, retry = (int(a) for a in argv[3:])
    t = sale(port, key, stock, holders, buyers, retry)
    share = 100.0 * t.false_refused / max(t.refused, 1)
    print(
        f"{t.purchases} purchases, {t.granted} units granted, {t.refused} refused, "
        f"{t.false_refused} false refusals ({share:.2f}% of refusals), {t.retried} retries "
        f"({t.retried - t.retries_differing} replayed), {t.ttl_exhausted} TTL exhausted, "
        f"{len(t.other_errors)} other errors, {t.left} left, {t.seconds:.1f} s"
    )
    for e in t.other_errors[:5]:
        print(f"  error: {e}")
    oversold = t.granted > stock or t.left < 0
    return 1 if oversold or t.retries_differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
