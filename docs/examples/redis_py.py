#!/usr/bin/env python3
"""redis-ctr from Python with the redis_ctr library (clients/python, on redis-py).

    pip install ./clients/python        # from the repository root; brings redis-py

redis_ctr.Ctr and redis_ctr.Pnc wrap any redis-py client (Redis or RedisCluster; the asyncio
twins are in redis_ctr.asyncio): typed methods, the same replies under RESP2 and RESP3
(CTR.INFO as a dict, refusals as None), the module's errors as exception classes. In a cluster
each command goes to its key's master; keys a command uses together share a {hash tag}.

Usage:
  REDIS_PORT=6379 python3 redis_py.py                             # one server (make run)
  REDIS_PORT=6379 REDIS_CLUSTER_PORT=7000 python3 redis_py.py     # and a cluster (make cluster)
"""
import multiprocessing
import os

import redis
from redis.cluster import RedisCluster

import redis_ctr


def standalone(port):
    r = redis.Redis(port=port)
    r.delete("page:views", "orders:paid", "sale:stock", "page:likes", "page:hits")
    ctr, pnc = redis_ctr.Ctr(r), redis_ctr.Pnc(r)

    assert ctr.add("page:views", 41) == 41
    assert ctr.add("page:views", 1) == 42
    assert ctr.mget("page:views", "page:other") == [42, 0]

    # A retried add with the same token counts once.
    for _ in range(3):
        paid = ctr.add("orders:paid", 1, token="order-1001")
    assert paid == 1

    # Inventory that never oversells: a refused purchase is None; a retried purchase (same
    # token) replays its first outcome.
    ctr.add("sale:stock", 5)
    ctr.floor("sale:stock", 0)
    assert ctr.decrfloor("sale:stock", 4, token="order-1") == 1
    assert ctr.decrfloor("sale:stock", 4, token="order-2") is None
    assert ctr.decrfloor("sale:stock", 4, token="order-1") == 1
    try:
        ctr.floor("sale:stock", 10)
    except redis_ctr.BelowFloor as e:
        refusal = str(e)

    # CTR.INFO as a dict, whatever the protocol.
    info = ctr.info("sale:stock")
    resp2 = redis_ctr.Ctr(redis.Redis(port=port, protocol=2)).info("sale:stock")
    assert info["value"] == resp2["value"] == 1 and sum(info["budgets"]) == 1

    assert pnc.add("page:likes", 10) == 10
    assert pnc.add("page:likes", -3) == 7

    # A thousand +1 become one CTR.ADD (flushed at the end of the with block, and every
    # 100 ms or 10,000 adds before it), each sum tokened so that a retried flush counts once.
    with redis_ctr.CoalescingWriter(r) as writer:
        for _ in range(1000):
            writer.add("page:hits")
    print("standalone: views", ctr.get("page:views"), "| paid", paid,
          "| stock", info["value"], "budgets", info["budgets"], f"({refusal})",
          "| likes", pnc.get("page:likes"),
          "| hits", ctr.get("page:hits"), "in", writer.stats.commands, "command(s)")
    floored_spread(r)


def floored_spread(r):
    """A flash sale: a floored counter spread over 4 holders (one server here), bought from by
    the probe rule; every purchase retried, as after a timeout, replays its first answer."""
    ctr = redis_ctr.Ctr(r)
    r.delete("drop:stock", *(ctr.info("drop:stock") or {}).get("holders", []))
    ctr.add("drop:stock", 12)
    ctr.floor("drop:stock", 0)
    ctr.spread("drop:stock", 4)
    bought = [ctr.decrfloor("drop:stock", 1, token=f"drop-order-{i}") for i in range(15)]
    retried = [ctr.decrfloor("drop:stock", 1, token=f"drop-order-{i}") for i in range(15)]
    assert retried == bought
    granted = sum(b is not None for b in bought)
    print(f"drop: {granted} of 15 purchases granted over 4 holders, retries replayed,"
          f" stock {ctr.get('drop:stock')} (floor {ctr.info('drop:stock')['floor']})")


def cluster(port):
    rc = RedisCluster(host="127.0.0.1", port=port)
    ctr = redis_ctr.Ctr(rc)

    # Single-key commands go to the master of the key's slot.
    keys = [f"counter:{i}" for i in range(100)]
    for i, key in enumerate(keys):
        ctr.add(key, i)
    assert sum(ctr.get(k) for k in keys) == sum(range(100))
    nodes = {rc.get_node_from_key(k).port for k in keys}

    # Keys used together share a hash tag: {page:1} puts both counters in one slot.
    ctr.add("{page:1}:views", 3)
    assert ctr.mget("{page:1}:views", "{page:1}:likes") == [3, 0]

    # A reconcile job: the stream and its counter in the same slot.
    for n in range(5):
        rc.xadd("{orders}:log", {"order": n})
    value, drift = ctr.reconcile_from("{orders}:count", "STREAM", "{orders}:log")
    assert (value, drift) == (5, -5)

    # Across slots: refused (redis-py stops it before sending; the server would say CROSSSLOT).
    try:
        ctr.mget("{a}:x", "{b}:x")
        raise AssertionError("CTR.MGET across slots was not refused")
    except (redis.exceptions.RedisClusterException, redis.exceptions.ResponseError) as e:
        refusal = str(e)
    print(f"cluster: 100 counters on {len(nodes)} masters | reconciled {value} (drift {drift})"
          f" | across slots: {refusal}")
    spread_counter(port)


def write_views(port, adds):
    """One writer process: plain adds; the library spreads them over the holders."""
    ctr = redis_ctr.Ctr(RedisCluster(host="127.0.0.1", port=port))
    for _ in range(adds):
        ctr.add("site:views", 1)
    # A tokened add goes to the token's holder; its retry reaches the same one: counted once.
    for _ in range(2):
        ctr.add("site:views", 100, token=f"batch-{os.getpid()}")


def spread_counter(port):
    """A hot counter spread over holders on every master, written from 4 processes with
    add, read with get (the home key replies the total)."""
    rc = RedisCluster(host="127.0.0.1", port=port)
    ctr = redis_ctr.Ctr(rc)
    for holder in (ctr.info("site:views") or {}).get("holders", ["site:views"])[::-1]:
        rc.delete(holder)  # a fresh start when run again (the home last)
    holders = ctr.spread("site:views", 6)
    writers = [multiprocessing.Process(target=write_views, args=(port, 250)) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
        assert w.exitcode == 0
    info = ctr.info("site:views")
    assert ctr.get("site:views") == info["value"] == 4 * 250 + 4 * 100
    assert all(v > 0 for v in info["holder_values"])
    masters = {rc.get_node_from_key(h).port for h in holders}
    print(f"cluster: spread counter over {len(holders)} holders on {len(masters)} masters,"
          f" written by 4 processes: {ctr.get('site:views')} (per holder {info['holder_values']})")


if __name__ == "__main__":
    standalone(int(os.environ.get("REDIS_PORT", "6379")))
    if os.environ.get("REDIS_CLUSTER_PORT"):
        cluster(int(os.environ["REDIS_CLUSTER_PORT"]))
