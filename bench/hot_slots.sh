#!/usr/bin/env bash
# The hot key gone, seen with the servers' own tools (results in docs/BENCHMARKS.md, "Hot slots
# before and after CTR.SPREAD"). On a local 3-master cluster started for the run, with
# per-slot statistics switched on (`cluster-slot-stats-enabled`), two phases of the same load:
#   before: ADDS pipelined adds (redis-benchmark -P 16, 16 connections) to one counter, `hot`;
#   after:  `CTR.SPREAD hot 16`, then the same ADDS spread evenly over its holders (the names
#           CTR.SPREAD replies; redis-benchmark cannot pick names from a list, so one run per
#           holder against the master serving it, the same 16 connections and pipeline);
# each phase with a background of ROUNDS adds to one counter in every one of the 16384 slots
# (redis-cli --pipe to each master, keys of its own slots), so that the median slot is an
# ordinary one. Per phase it reads `CLUSTER SLOT-STATS ORDERBY cpu-usec LIMIT 16384` on every
# master (the difference over the phase) and `INFO cpu`, and on servers that have it (Redis
# 8.6+) `HOTKEYS START METRICS 1 CPU` / `HOTKEYS GET` on every master; it prints the max/median
# ratio of per-slot CPU and of per-master CPU before and after, the hottest slot, and the top
# keys HOTKEYS found.
#
# Usage (from the repository root, after `make build`):
#   REDIS_SERVER=<redis-server or valkey-server binary> bash bench/hot_slots.sh
# The server must have CLUSTER SLOT-STATS (Redis 8.2+, Valkey 8.0+). Environment: CTR_MODULE
# (module path), ADDS (hot adds per phase, default 1048576), ROUNDS (background adds per slot
# per phase, default 20), HOLDERS (default 16).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODULE=${CTR_MODULE:-$PWD/target/release/libredis_ctr.so}
ADDS=${ADDS:-1048576}
ROUNDS=${ROUNDS:-20}
HOLDERS=${HOLDERS:-16}
# redis-benchmark sends whole pipelines (-n rounded up to a multiple of -P 16): each holder's
# share, and so ADDS, a multiple of 16, to count exactly.
per_holder=$((ADDS / HOLDERS / 16 * 16))
ADDS=$((per_holder * HOLDERS))
warm_per_holder=$((per_holder / 4 / 16 * 16))
[ -f "$MODULE" ] || { echo "module not found at $MODULE (run make build)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed (key names per slot, medians)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. bench/lib.sh

export CTR_MODULE=$MODULE
start_cluster
# Valkey: yes; Redis 8.2+: a list of metrics, of which memory cannot be switched on at runtime.
for p in "${ports[@]}"; do
  cli "$p" CONFIG SET cluster-slot-stats-enabled yes | grep -qx OK ||
    cli "$p" CONFIG SET cluster-slot-stats-enabled "cpu net" | grep -qx OK ||
    die "$(cli "$p" INFO server | tr -d '\r' | grep -E '^(redis|valkey)_version:') has no cluster-slot-stats-enabled (Redis 8.2+, Valkey 8.0+)"
done
server_version=$(cli "${ports[0]}" INFO server | tr -d '\r' |
  awk -F: '/^valkey_version:/ { v = "Valkey " $2 } /^redis_version:/ { r = "Redis " $2 } END { print (v != "" ? v : r) }')
hotkeys=no
[ -n "$(cli "${ports[0]}" COMMAND INFO HOTKEYS | tr -d '\r\n')" ] && hotkeys=yes
log "$server_version, cluster on ports ${ports[*]}; $ADDS hot adds and $ROUNDS background adds per slot per phase; HOTKEYS: $hotkeys"

# One key per slot: bg:<n>, the first n whose slot is that slot (CRC16/XModem, as Redis).
python3 - "$tmp/slot_keys" <<'EOF'
import binascii, sys
keys, n = {}, 0
while len(keys) < 16384:
    name = "bg:%d" % n
    keys.setdefault(binascii.crc_hqx(name.encode(), 0) % 16384, name)
    n += 1
with open(sys.argv[1], "w") as f:
    for slot in range(16384):
        f.write("%d %s\n" % (slot, keys[slot]))
EOF

# background file per master: ROUNDS x (CTR.ADD <key of slot s> 1) for every slot s it serves,
# in the protocol redis-cli --pipe sends.
for p in "${ports[@]}"; do
  cli "$p" CLUSTER NODES | tr -d '\r' | awk '/myself/ { for (i = 9; i <= NF; i++) print $i }' >"$tmp/ranges.$p"
  python3 - "$tmp/slot_keys" "$tmp/ranges.$p" "$ROUNDS" "$tmp/bg.$p" <<'EOF'
import sys
keys = dict(line.split() for line in open(sys.argv[1]))
mine = []
for r in open(sys.argv[2]).read().split():
    lo, _, hi = r.partition("-")
    mine.extend(range(int(lo), int(hi or lo) + 1))
with open(sys.argv[4], "wb") as f:
    for _ in range(int(sys.argv[3])):
        for slot in mine:
            k = keys[str(slot)].encode()
            f.write(b"*3\r\n$7\r\nCTR.ADD\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (len(k), k))
EOF
done

# slot_cpu PORT: "slot cpu-usec" for every slot the master serves.
slot_cpu() {
  cli "$1" CLUSTER SLOT-STATS ORDERBY cpu-usec LIMIT 16384 | tr -d '\r' |
    awk '/^[0-9]+$/ { if (prev ~ /^[0-9]+$/ || prev == "") slot = $0; else if (prev == "cpu-usec") print slot, $0 }
         { prev = $0 }'
}
# cpu_ms PORT: the process's CPU time so far (user + system), in ms.
cpu_ms() { cli "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { ms += $2 * 1000 } END { printf "%d\n", ms }'; }

snapshot() {
  local p
  for p in "${ports[@]}"; do
    slot_cpu "$p" | sed "s/^/$p /" >>"$tmp/slots.$1"
    echo "$p $(cpu_ms "$p")" >>"$tmp/cpu.$1"
  done
}

hotkeys_start() {
  [ "$hotkeys" = yes ] || return 0
  local p
  for p in "${ports[@]}"; do cli "$p" HOTKEYS START METRICS 1 CPU COUNT 5 >/dev/null; done
}
# hotkeys_report PHASE: each master's top keys by CPU (µs) and its total, then RESET.
hotkeys_report() {
  [ "$hotkeys" = yes ] || return 0
  local p
  for p in "${ports[@]}"; do
    cli "$p" HOTKEYS STOP >/dev/null
    cli "$p" HOTKEYS GET | tr -d '\r' | awk -v phase="$1" -v port="$p" '
      prev == "all-commands-all-slots-us" { total = $0 }
      listing && n < 6 { top[n++] = $0 }
      $0 == "by-cpu-time-us" { listing = 1 }
      { prev = $0 }
      END {
        line = ""
        for (i = 0; i + 1 < n; i += 2) line = line (i ? ", " : "") "`" top[i] "` " top[i + 1]
        printf "| %s | %s | %s | %s |\n", phase, port, total, line
      }' >>"$tmp/hotkeys"
    cli "$p" HOTKEYS RESET >/dev/null
  done
}

# background: the per-slot adds to every master, in the background of the caller.
background() {
  local p
  for p in "${ports[@]}"; do
    redis-cli -h 127.0.0.1 -p "$p" --pipe <"$tmp/bg.$p" >"$tmp/pipe.$p" 2>&1 &
  done
}

# run_phase PHASE LOAD: a warm-up of the hot load (a quarter of it, not measured: a counter
# that has just been created or spread first doubles its shards as its add rate climbs), then
# between two snapshots the background adds and the hot load.
run_phase() {
  local phase=$1 load=$2
  "$load" "$warm_per_holder"
  snapshot "$phase.0"
  hotkeys_start
  background
  wait
  for p in "${ports[@]}"; do grep -q 'errors: 0,' "$tmp/pipe.$p" || die "background adds failed on $p: $(cat "$tmp/pipe.$p")"; done
  "$load" "$per_holder"
  hotkeys_report "$phase"
  snapshot "$phase.1"
}

# The hot load, 16 connections at pipeline 16 in both phases: on one key, then holder by holder
# (N each, to the master serving the holder). One redis-benchmark at a time: the servers time
# commands by the wall clock (commandstats, SLOT-STATS and HOTKEYS alike), so 16 load
# generators preempting the servers on a small machine would inflate the figures of the phase
# after, not its work.
hot_load() {
  redis-benchmark -h 127.0.0.1 -p "$(owner "$1")" -c 16 -P 16 -n "$2" -q CTR.ADD "$1" 1 >/dev/null
}
# one_key N / spread_keys N: N adds per holder's share.
one_key() { hot_load hot $(($1 * HOLDERS)); }
spread_keys() {
  local h
  for h in "${holders[@]}"; do hot_load "$h" "$1"; done
}

cli "$(owner hot)" CTR.ADD hot 0 >/dev/null
run_phase before one_key
mapfile -t holders < <(cli "$(owner hot)" CTR.SPREAD hot "$HOLDERS")
[ "${#holders[@]}" = "$HOLDERS" ] || die "CTR.SPREAD replied ${#holders[@]} holders"
run_phase after spread_keys
total=$(cli "$(owner hot)" CTR.GET hot)
expected=$((2 * (ADDS + warm_per_holder * HOLDERS)))
[ "$total" = "$expected" ] || die "hot total $total after both phases, expected $expected"
# Each background counter took ROUNDS adds per phase (the first three slots' keys, say).
while read -r slot k; do
  [ "$(cli "$(owner "$k")" CTR.GET "$k")" = "$((2 * ROUNDS))" ] || die "background counter $k of slot $slot is off"
done < <(head -n 3 "$tmp/slot_keys")

# The table: per phase, the per-slot CPU over the phase (after - before) across all 16384 slots,
# and the per-master CPU (INFO cpu) across the 3 masters.
printf '%s\n' "${holders[@]}" >"$tmp/holders"
python3 - "$tmp" "${ports[*]}" "$ADDS" <<'EOF'
import binascii, statistics, sys
tmp, ports = sys.argv[1], sys.argv[2].split()
def keyslot(key):
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return binascii.crc_hqx(key.encode(), 0) % 16384
holders = [line.rstrip("\n") for line in open(f"{tmp}/holders")]
home_slot = keyslot("hot")
holder_slots = {keyslot(h) for h in holders[1:]}
def load(path):
    out = {}
    for line in open(path):
        f = line.split()
        out[tuple(f[:-1])] = int(f[-1])
    return out
adds = int(sys.argv[3])
print("| phase | slot CPU max/median | hottest slot (its share of all slots' CPU) | median slot µs | `hot`'s slots: µs per add | master CPU max/median | per-master CPU ms |")
print("|---|---|---|---|---|---|---|")
for phase in ("before", "after"):
    a, b = load(f"{tmp}/slots.{phase}.0"), load(f"{tmp}/slots.{phase}.1")
    per_slot = {}
    for (p, s), v in b.items():
        per_slot[int(s)] = per_slot.get(int(s), 0) + v - a.get((p, s), 0)
    assert len(per_slot) == 16384, len(per_slot)
    values = sorted(per_slot.values())
    median = statistics.median(values)
    hottest = max(per_slot, key=per_slot.get)
    share = per_slot[hottest] / sum(values)
    label = ("the home of `hot`" if hottest == home_slot
             else "a holder of `hot`" if hottest in holder_slots else "another key's")
    # The hot counter's slots (the home's, and the holders' after the spread), less the
    # background adds they took like every slot.
    mine = {home_slot} | (holder_slots if phase == "after" else set())
    per_add = (sum(per_slot[s] for s in mine) - len(mine) * median) / adds
    ca, cb = load(f"{tmp}/cpu.{phase}.0"), load(f"{tmp}/cpu.{phase}.1")
    masters = [cb[(p,)] - ca[(p,)] for p in ports]
    print(f"| {phase} | {max(values) / median:,.0f} | {hottest}, {label} ({share:.0%}) | {median:g} "
          f"| {per_add:.2f} | {max(masters) / statistics.median(masters):.2f} | {' / '.join(map(str, masters))} |")
EOF
if [ "$hotkeys" = yes ]; then
  echo
  echo "HOTKEYS (CPU, per master: all commands' µs in the phase, the top keys by µs):"
  echo
  echo "| phase | master | all commands µs | top keys (µs) |"
  echo "|---|---|---|---|"
  cat "$tmp/hotkeys"
fi
