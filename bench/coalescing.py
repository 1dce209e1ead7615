"""One process making N single adds over K keys with the Python client: one CTR.ADD each
(mode "single") or through a CoalescingWriter (mode "coalesced"). Prints the wall seconds and
the writer's own count of commands. Run by bench/coalescing.sh."""

import sys
import time

import redis

import redis_ctr

port, mode, n, keys = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(port=port)
names = [f"page:{i}:views" for i in range(keys)]
start = time.perf_counter()
if mode == "single":
    ctr = redis_ctr.Ctr(r)
    for i in range(n):
        ctr.add(names[i % keys], 1)
    sent = n
else:
    with redis_ctr.CoalescingWriter(r) as writer:
        for i in range(n):
            writer.add(names[i % keys], 1)
    sent = writer.stats.commands
elapsed = time.perf_counter() - start
total = sum(redis_ctr.Ctr(r).get(k) for k in names)
print(f"{elapsed:.2f} {sent} {total}")
