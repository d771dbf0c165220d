#!/usr/bin/env bash
# fsync latency with and without a separate log device (issue 13, SLOG).
#
# The pool's one data device is an image file slowed by a delay handler
# (`tarn inject -D MS`: every I/O completes no earlier than MS ms after it
# started, as a slow disk would); the log device, when there is one, is an
# image on /dev/shm (tmpfs standing in for NVRAM). fio writes 4 KiB at
# random offsets of a 64 MiB file on the mount, fsync after each write, one
# job, RUNTIME seconds. Reported per configuration: write IOPS and the
# fsync call's p50 and p99 latency (fio's `sync` percentiles).
#
# Without a log device every fsync writes its log block to the slow device
# and flushes it (two delayed I/Os); with one, the log block goes to
# /dev/shm and only the txg syncs (every few seconds) meet the delay — so
# fsync latency follows the log device's, not the main device's.
#
# A private daemon (TARN_CACHE/TARN_SOCKET) under $DIR; every file is
# removed at the end. Needs /dev/fuse, fio and python3.
#
# Usage: bench/slog-latency.sh [RUNTIME_S] [DELAY_MS]    (defaults 20, 5)
set -euo pipefail

RUNTIME=${1:-20}
DELAY_MS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARN=${TARN:-$ROOT/target/release/tarn}
DIR=${DIR:-$(mktemp -d /tmp/tarn-slog-bench.XXXXXX)}
SHM=${SHM:-/dev/shm/tarn-slog-bench.$$}
export TARN_CACHE=$DIR/tarn.cache TARN_SOCKET=$DIR/tarn.sock

[ -x "$TARN" ] || (cd "$ROOT" && cargo build --release -p tarn-cli >/dev/null)
command -v fio >/dev/null || { echo "fio is required" >&2; exit 1; }
mkdir -p "$SHM"
cleanup() {
    "$TARN" pool destroy -f tank >/dev/null 2>&1 || true
    "$TARN" daemon stop >/dev/null 2>&1 || true
    rm -rf "$DIR" "$SHM"
}
trap cleanup EXIT

one_run() {
    local label=$1 log=$2
    "$TARN" pool destroy -f tank >/dev/null 2>&1 || true
    rm -f "$DIR"/*.img "$SHM"/*.img
    mkdir -p "$DIR/mnt"
    if [ "$log" = yes ]; then
        "$TARN" pool create -m "$DIR/mnt" tank "$DIR/a.img" log "$SHM/log.img" --size 1G
    else
        "$TARN" pool create -m "$DIR/mnt" tank "$DIR/a.img" --size 1G
    fi
    "$TARN" inject -d "$DIR/a.img" -D "$DELAY_MS" tank >/dev/null
    fio --name=fsync --filename="$DIR/mnt/f.dat" --rw=randwrite --bs=4k --size=64M --ioengine=psync --fsync=1 \
        --time_based --runtime="$RUNTIME" --percentile_list=50:99 --output-format=json --output="$DIR/fio.json" >/dev/null
    "$TARN" inject -c all >/dev/null
    LABEL=$label python3 - "$DIR/fio.json" <<'EOF'
import json, os, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
p = j["sync"]["lat_ns"]["percentile"]
print("%-22s %8.0f IOPS   fsync p50 %7.2f ms   p99 %7.2f ms" % (
    os.environ["LABEL"], j["write"]["iops"], p["50.000000"] / 1e6, p["99.000000"] / 1e6))
EOF
    if [ "$log" = yes ]; then "$TARN" pool status tank | sed -n '/^config:/,/^errors:/p' >&2; fi
}

echo "fio 4 KiB randwrite, fsync=1, 1 job, ${RUNTIME} s; main device delayed ${DELAY_MS} ms per I/O"
one_run "no log device" no
one_run "log device on tmpfs" yes
