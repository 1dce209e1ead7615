#!/usr/bin/env bash
# What the module's per-counter state costs: memory per remembered token and per ledger entry,
# memory of a reconciled counter holding a full bucket retention, and the server time of
# CTR.RECONCILE FROM STREAM over a stream of 1,000,000 entries. Prints markdown tables.
#
#   bash bench/state.sh           (make bench runs it after bench/run.sh)
#
# Environment: CTR_MODULE (module path), STATE_TOKENS (default 1000000; the memory of the token
# table is also reported at 60% of it, to show where hash-table growth puts a count),
# STATE_COUNTERS (default 10000 reconciled counters), STATE_STREAM (default 1000000 entries),
# STATE_ONLY=history (only the ctr.track-history table).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
MODULE=${CTR_MODULE:-$repo/target/release/libredis_ctr.so}
TOKENS=${STATE_TOKENS:-1000000}
COUNTERS=${STATE_COUNTERS:-10000}
STREAM=${STATE_STREAM:-1000000}
# 1 s buckets kept for 60 s: a full retention is 60 buckets, reachable with AT up to 60 s ahead.
MODULE_ARGS="bucket-ms 1000 bucket-retention-ms 60000 token-max-future-ms 60000"

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
[ -f "$MODULE" ] || die "module not found: $MODULE (build it with make build)"
start_server

used() { rcli INFO memory | awk -F: '/^used_memory:/ { print $2 + 0 }'; }
# The server's clock in unix ms (shell arithmetic: 64-bit, unlike mawk's printf %d).
server_ms() {
  local t
  mapfile -t t < <(rcli TIME)
  echo $((t[0] * 1000 + t[1] / 1000))
}
pipe() { rcli --pipe >/dev/null; }

# RESP for `CTR.<cmd> <key> 1 TOKEN <prefix><i>` for i in [from, to).
token_stream() {
  awk -v cmd="$1" -v key="$2" -v from="$3" -v to="$4" 'BEGIN {
    for (i = from; i < to; i++) {
      t = sprintf("order-%09d", i)
      printf "*5\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\n1\r\n$5\r\nTOKEN\r\n$%d\r\n%s\r\n",
        length(cmd), cmd, length(key), key, length(t), t
    }
  }'
}

# Bytes per entry at 60% of TOKENS and at TOKENS, for one command filling one key.
per_entry() {
  local cmd=$1 key=$2 setup=$3 base mid full part
  rcli FLUSHALL >/dev/null
  eval "$setup"
  base=$(used)
  part=$((TOKENS * 6 / 10))
  token_stream "$cmd" "$key" 0 "$part" | pipe
  mid=$(used)
  token_stream "$cmd" "$key" "$part" "$TOKENS" | pipe
  full=$(used)
  printf '| `%s ... TOKEN` | %d | %.1f | %d | %.1f |\n' "$cmd" "$part" \
    "$(echo "$mid $base $part" | awk '{ print ($1 - $2) / $3 }')" "$TOKENS" \
    "$(echo "$full $base $TOKENS" | awk '{ print ($1 - $2) / $3 }')"
}

# ctr.track-history yes: what a counter costs with 1, 10 and 60 buckets, against the same
# counters without history (each add lands in its own 1 s bucket: AT now + i s).
history_cost() {
  local buckets base after plain
  echo "### ctr.track-history: bytes per counter"
  echo
  echo "| counters | track-history | buckets each | bytes per counter (used_memory delta) | MEMORY USAGE t:1 |"
  echo "|---:|---|---:|---:|---:|"
  for buckets in 0 1 10 60; do
    rcli FLUSHALL >/dev/null
    if [ "$buckets" -eq 0 ]; then rcli CONFIG SET ctr.track-history no >/dev/null; else rcli CONFIG SET ctr.track-history yes >/dev/null; fi
    base=$(used)
    now=$(server_ms)
    awk -v n="$COUNTERS" -v now="$now" -v b="$buckets" 'BEGIN {
      if (b == 0) b = 1
      for (k = 0; k < n; k++) {
        key = "t:" k
        for (i = 0; i < b; i++) {
          at = sprintf("%.0f", now + 1000 * i + 1)
          printf "*5\r\n$7\r\nCTR.ADD\r\n$%d\r\n%s\r\n$1\r\n1\r\n$2\r\nAT\r\n$%d\r\n%s\r\n",
            length(key), key, length(at), at
        }
      }
    }' | pipe
    after=$(used)
    printf '| %d | %s | %s | %.1f | %s |\n' "$COUNTERS" "$([ "$buckets" -eq 0 ] && echo no || echo yes)" \
      "$(rcli CTR.INFO t:1 | awk 'prev == "bucket_count" { print; exit } { prev = $0 }')" \
      "$(echo "$after $base $COUNTERS" | awk '{ print ($1 - $2) / $3 }')" "$(rcli MEMORY USAGE t:1)"
  done
  rcli CONFIG SET ctr.track-history no >/dev/null
  echo
}
history_cost
[ "${STATE_ONLY:-}" = history ] && exit 0

echo "### Memory per remembered token (one key)"
echo
echo "| command | entries | bytes per entry | entries | bytes per entry |"
echo "|---|---:|---:|---:|---:|"
per_entry CTR.ADD tok 'rcli CTR.ADD tok 0 >/dev/null'
per_entry CTR.DECRFLOOR led 'rcli CTR.ADD led 1000000000000 >/dev/null; rcli CTR.FLOOR led 0 >/dev/null'
echo

# Hot counters: 10,000 counters restored with 16 sub-shards each (CTR.SETSTATE with the state a
# promotion leaves; python3 writes the binary state).
rcli FLUSHALL >/dev/null
base=$(used)
python3 - "$COUNTERS" <<'PY' | pipe
import sys
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
zigzag = lambda v: varint((v << 1) ^ (v >> 63))
state = bytes([1, 1]) + zigzag(16000) + bytes([2]) + varint(16) + zigzag(1000) * 16 + bytes([0])
w = sys.stdout.buffer
for k in range(int(sys.argv[1])):
    key = b"h:%d" % k
    parts = [b"CTR.SETSTATE", key, state]
    w.write(b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
PY
after=$(used)
echo "### A hot counter (16 sub-shards)"
echo
echo "| counters | shards each | bytes per counter (used_memory delta) | MEMORY USAGE h:1 |"
echo "|---:|---:|---:|---:|"
printf '| %d | %s | %.1f | %s |\n' "$COUNTERS" "$(rcli CTR.INFO h:1 | awk 'prev == "shards" { print; exit } { prev = $0 }')" \
  "$(echo "$after $base $COUNTERS" | awk '{ print ($1 - $2) / $3 }')" "$(rcli MEMORY USAGE h:1)"
echo

# Reconciled counters, each with one add in each of the 60 retained buckets.
rcli FLUSHALL >/dev/null
base=$(used)
now=$(server_ms)
awk -v n="$COUNTERS" -v now="$now" 'BEGIN {
  for (k = 0; k < n; k++) {
    key = "r:" k
    printf "*3\r\n$13\r\nCTR.RECONCILE\r\n$%d\r\n%s\r\n$1\r\n0\r\n", length(key), key
    for (b = 0; b < 60; b++) {
      at = sprintf("%.0f", now + 1000 * b + 1)
      printf "*5\r\n$7\r\nCTR.ADD\r\n$%d\r\n%s\r\n$1\r\n1\r\n$2\r\nAT\r\n$%d\r\n%s\r\n",
        length(key), key, length(at), at
    }
  }
}' | pipe
after=$(used)
buckets=$(rcli CTR.INFO r:1 | awk 'prev == "bucket_count" { print; exit } { prev = $0 }')
echo "### A reconciled counter with a full bucket retention"
echo
echo "| counters | buckets each | bytes per counter (used_memory delta) | MEMORY USAGE r:1 |"
echo "|---:|---:|---:|---:|"
printf '| %d | %s | %.1f | %s |\n' "$COUNTERS" "$buckets" \
  "$(echo "$after $base $COUNTERS" | awk '{ print ($1 - $2) / $3 }')" "$(rcli MEMORY USAGE r:1)"
echo

# CTR.RECONCILE FROM STREAM over STREAM entries: all at or before the watermark (the counted
# part is XLEN), and all after it (every entry is read, newest first, in pages).
rcli FLUSHALL >/dev/null
# Start both counters' histories first: the watermark must not be older than their start.
rcli CTR.RECONCILE c:before 0 >/dev/null
rcli CTR.RECONCILE c:after 0 >/dev/null
sleep 1
w=$(( $(server_ms) / 1000 * 1000 ))
fill_stream() {
  awk -v key="$1" -v first="$2" -v n="$STREAM" 'BEGIN {
    for (i = 0; i < n; i++) {
      id = sprintf("%.0f-%d", first + int(i / 1000), i % 1000)
      printf "*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\nf\r\n$1\r\nv\r\n",
        length(key), key, length(id), id
    }
  }' | pipe
}
fill_stream before "$(( w - STREAM / 1000 - 1 ))"
fill_stream after "$(( w + 1 ))"
echo "### CTR.RECONCILE FROM STREAM over $STREAM entries"
echo
echo "| entries after the watermark | reply | server time (ms) |"
echo "|---:|---|---:|"
for case in before after; do
  rcli CONFIG RESETSTAT >/dev/null
  reply=$(rcli CTR.RECONCILE "c:$case" FROM STREAM "$case" AT "$w" | paste -sd' ' -)
  usec=$(rcli INFO commandstats | awk -F'[=,]' '/^cmdstat_ctr.reconcile:/ { print $4 }')
  if [ "$case" = before ]; then n=0; else n=$STREAM; fi
  printf '| %d | `[%s]` | %.1f |\n' "$n" "$reply" "$(echo "$usec" | awk '{ print $1 / 1000 }')"
done
