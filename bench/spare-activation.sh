#!/usr/bin/env bash
# Time from a device fault to the end of the resilver onto a hot spare, on a
# small mirror (issue 12, hot spares).
#
# Each run: a 2-way mirror of two 1 GiB image files with a spare of 1 GiB,
# DATA_MB of data written with `tarn bench --keep` (incompressible, 1 MiB
# records), then the second child vanishes (`tarn inject -e nxio`) and
#   trigger=write: a 1 MiB write-test meets it at once (a busy pool);
#   trigger=idle:  nothing is written (the spare thread's probe, every 5 s,
#                  finds it).
# Timed from just before the inject, by polling `pool status --json` every
# 20 ms: when the spare is INUSE, and when it is resilvered (its DTL empty,
# the resilver finished); the resilver's own seconds and bytes come from the
# scan record. A private daemon (TARN_CACHE/TARN_SOCKET) under $DIR; every
# file is removed at the end.
#
# Usage: bench/spare-activation.sh [RUNS] [DATA_MB]    (defaults 3, 512)
set -euo pipefail

RUNS=${1:-3}
DATA_MB=${2:-512}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARN=${TARN:-$ROOT/target/release/tarn}
DIR=${DIR:-$(mktemp -d /tmp/tarn-spare-bench.XXXXXX)}
export TARN_CACHE=$DIR/tarn.cache TARN_SOCKET=$DIR/tarn.sock

[ -x "$TARN" ] || (cd "$ROOT" && cargo build --release -p tarn-cli >/dev/null)
cleanup() { "$TARN" daemon stop >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT

now() { date +%s.%N; }

# Seconds since $1, 3 decimals.
since() { echo "$(now) - $1" | bc -l | xargs printf '%.3f'; }

status() { "$TARN" pool status --json tank; }

one_run() {
    local trigger=$1
    "$TARN" daemon stop >/dev/null 2>&1 || true
    rm -f "$DIR"/*.img "$TARN_CACHE"
    "$TARN" pool create -m none tank mirror "$DIR/a.img" "$DIR/b.img" spare "$DIR/s1.img" --size 1G
    "$TARN" daemon stop >/dev/null
    "$TARN" bench tank --workload seqwrite --size "${DATA_MB}M" --keep >/dev/null
    "$TARN" pool sync tank
    local t0 t_inuse="" t_done=""
    t0=$(now)
    "$TARN" inject -d "$DIR/b.img" -e nxio tank >/dev/null
    if [ "$trigger" = write ]; then
        "$TARN" pool write-test tank --bytes 1M >/dev/null
    fi
    while :; do
        local st
        st=$(status)
        if [ -z "$t_inuse" ] && echo "$st" | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]; sys.exit(0 if any(x["state"]=="INUSE" for x in s["spares"]) else 1)'; then
            t_inuse=$(since "$t0")
        fi
        if [ -n "$t_inuse" ] && echo "$st" | python3 -c '
import json,sys
s=json.load(sys.stdin)[0]
def leaves(v):
    return [v] if not v["children"] else [l for c in v["children"] for l in leaves(c)]
sp=[l for t in s["vdevs"] for l in leaves(t) if l["path"].endswith("s1.img")]
sc=s.get("scan") or {}
sys.exit(0 if sp and sp[0]["missed_txgs"] is None and sc.get("func")=="Resilver" and sc.get("state")=="Finished" else 1)'; then
            t_done=$(since "$t0")
            break
        fi
        sleep 0.02
    done
    local rep
    rep=$(status | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]; r=s["scan"]["report"]; print("%.3f %d" % (r["seconds"], r["repaired_bytes"]))')
    set -- $rep
    printf '%-6s  inuse %6ss  resilvered %6ss  (resilver itself %ss, %s MiB written onto the spare, %.0f MiB/s)\n' \
        "$trigger" "$t_inuse" "$t_done" "$1" "$(($2 >> 20))" "$(echo "$2 / 1048576 / $1" | bc -l)"
    "$TARN" inject -c all >/dev/null
}

echo "tarn spare activation: 2-way mirror of 1 GiB files + 1 GiB spare, ${DATA_MB} MiB of data, $RUNS runs per trigger ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
for trigger in write idle; do
    for _ in $(seq "$RUNS"); do
        one_run "$trigger"
    done
done
