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
# Timed from just before the inject (this script's clock) by the pool's
# events, which carry their times and which polling does not disturb (a
# `pool status` would check the devices itself and find the fault): the
# device's statechange (the fault noticed), vdev_spare (the spare stands
# in), resilver_finish (the spare holds every block). The resilver's own
# seconds and bytes come from the scan record. The page cache is dropped
# before the fault (root; DROP=0 leaves it), so the resilver reads the
# surviving child from the disk. A private daemon
# (TARN_CACHE/TARN_SOCKET) under $DIR; every file is removed at the end.
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

one_run() {
    local trigger=$1
    "$TARN" daemon stop >/dev/null 2>&1 || true
    rm -f "$DIR"/*.img "$TARN_CACHE"
    "$TARN" pool create -m none tank mirror "$DIR/a.img" "$DIR/b.img" spare "$DIR/s1.img" --size 1G
    "$TARN" daemon stop >/dev/null
    "$TARN" bench tank --workload seqwrite --size "${DATA_MB}M" --keep >/dev/null
    "$TARN" pool sync tank
    "$TARN" pool events -c tank >/dev/null
    if [ "${DROP:-1}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
    local t0
    t0=$(date -u +%s.%N)
    "$TARN" inject -d "$DIR/b.img" -e nxio tank >/dev/null
    if [ "$trigger" = write ]; then
        "$TARN" pool write-test tank --bytes 1M >/dev/null
    fi
    local n=0
    until "$TARN" pool events -H tank | grep -q resilver_finish; do
        sleep 0.1
        n=$((n + 1))
        [ $n -lt 600 ] || { echo "no resilver_finish within 60 s" >&2; "$TARN" pool events tank >&2; exit 1; }
    done
    "$TARN" pool events -H tank | T0=$t0 TRIGGER=$trigger python3 -c '
import os, sys, datetime
t0 = float(os.environ["T0"])
def secs(ts):
    d, frac = ts.rstrip("Z").split(".")
    base = datetime.datetime.strptime(d, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()
    return base + float("0." + frac)
first = {}
for line in sys.stdin:
    ts, cls = line.split()[:2]
    first.setdefault(cls.rsplit(".", 1)[-1], secs(ts) - t0)
print("%-6s  fault noticed %6.3fs  spare stands in %6.3fs  resilvered %6.3fs" % (os.environ["TRIGGER"], first["statechange"], first["vdev_spare"], first["resilver_finish"]), end="")
'
    "$TARN" pool status --json tank | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]; r=s["scan"]["report"]; print("  (resilver %.3fs, %d MiB onto the spare, %.0f MiB/s)" % (r["seconds"], r["repaired_bytes"] >> 20, r["repaired_bytes"] / 1048576 / r["seconds"]))'
    "$TARN" inject -c all >/dev/null
}

echo "tarn spare activation: 2-way mirror of 1 GiB files + 1 GiB spare, ${DATA_MB} MiB of data, $RUNS runs per trigger, page cache dropped: ${DROP:-1} ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
for trigger in write idle; do
    for _ in $(seq "$RUNS"); do
        one_run "$trigger"
    done
done
