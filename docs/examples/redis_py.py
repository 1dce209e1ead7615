#!/usr/bin/env python3
"""redis-ctr from Python with redis-py.

The module's commands are not in redis-py's command list: send them as they are with
execute_command. CTR.INFO and PNC.INFO reply with a map: a dict for a RESP3 client
(protocol=3, redis-py 8's default), a flat [field, value, ...] list for a RESP2 one. In a cluster, RedisCluster routes
each command by its keys (it asks the server with COMMAND GETKEYS for CTR.RECONCILE, whose
source key follows FROM); keys a command uses together must share a {hash tag}.

Usage:
  REDIS_PORT=6379 python3 redis_py.py                             # one server (make run)
  REDIS_PORT=6379 REDIS_CLUSTER_PORT=7000 python3 redis_py.py     # and a cluster (make cluster)
"""
import os

import redis
from redis.cluster import RedisCluster


def standalone(port):
    r = redis.Redis(port=port, protocol=3, decode_responses=True)
    r.delete("page:views", "orders:paid", "sale:stock", "page:likes")

    assert r.execute_command("CTR.ADD", "page:views", 41) == 41
    assert r.execute_command("CTR.ADD", "page:views", 1) == 42
    assert r.execute_command("CTR.MGET", "page:views", "page:other") == [42, 0]

    # A retried add with the same token counts once.
    for _ in range(3):
        paid = r.execute_command("CTR.ADD", "orders:paid", 1, "TOKEN", "order-1001")
    assert paid == 1

    # Inventory that never oversells; a retried purchase replays its first outcome.
    r.execute_command("CTR.ADD", "sale:stock", 5)
    r.execute_command("CTR.FLOOR", "sale:stock", 0)
    assert r.execute_command("CTR.DECRFLOOR", "sale:stock", 4, "TOKEN", "order-1") == 1
    assert r.execute_command("CTR.DECRFLOOR", "sale:stock", 4, "TOKEN", "order-2") is None
    assert r.execute_command("CTR.DECRFLOOR", "sale:stock", 4, "TOKEN", "order-1") == 1

    # CTR.INFO: a dict under RESP3 ...
    info = r.execute_command("CTR.INFO", "sale:stock")
    assert info["value"] == 1 and info["floor"] == 0 and sum(info["budgets"]) == 1
    # ... and the same fields as a flat list under RESP2.
    r2 = redis.Redis(port=port, protocol=2, decode_responses=True)
    flat = r2.execute_command("CTR.INFO", "sale:stock")
    assert dict(zip(flat[::2], flat[1::2]))["value"] == info["value"]

    assert r.execute_command("PNC.ADD", "page:likes", 10) == 10
    assert r.execute_command("PNC.ADD", "page:likes", -3) == 7
    print("standalone: views", r.execute_command("CTR.GET", "page:views"),
          "| paid", paid, "| stock", info["value"], "budgets", info["budgets"],
          "| likes", r.execute_command("PNC.GET", "page:likes"))


def cluster(port):
    rc = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)

    # Single-key commands go to the master of the key's slot.
    keys = [f"counter:{i}" for i in range(100)]
    for i, key in enumerate(keys):
        rc.execute_command("CTR.ADD", key, i)
    assert sum(rc.execute_command("CTR.GET", k) for k in keys) == sum(range(100))
    nodes = {rc.get_node_from_key(k).port for k in keys}

    # Keys used together share a hash tag: {page:1} puts both counters in one slot.
    rc.execute_command("CTR.ADD", "{page:1}:views", 3)
    assert rc.execute_command("CTR.MGET", "{page:1}:views", "{page:1}:likes") == [3, 0]

    # A reconcile job: the stream and its counter in the same slot.
    for n in range(5):
        rc.xadd("{orders}:log", {"order": n})
    value, drift = rc.execute_command(
        "CTR.RECONCILE", "{orders}:count", "FROM", "STREAM", "{orders}:log")
    assert (value, drift) == (5, -5)

    # Across slots: refused (redis-py stops it before sending; the server would say CROSSSLOT).
    for command in (["CTR.MGET", "{a}:x", "{b}:x"],
                    ["CTR.RECONCILE", "{a}:count", "FROM", "STREAM", "{b}:log"]):
        try:
            rc.execute_command(*command)
            raise AssertionError(f"{command[0]} across slots was not refused")
        except (redis.exceptions.RedisClusterException, redis.exceptions.ResponseError) as e:
            refusal = str(e)
    print(f"cluster: 100 counters on {len(nodes)} masters | reconciled {value} (drift {drift})"
          f" | across slots: {refusal}")


if __name__ == "__main__":
    standalone(int(os.environ.get("REDIS_PORT", "6379")))
    if os.environ.get("REDIS_CLUSTER_PORT"):
        cluster(int(os.environ["REDIS_CLUSTER_PORT"]))
