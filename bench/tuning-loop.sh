#!/usr/bin/env bash
# Issue 4's tuning loop: one overdriven workload watched through the daemon
# while the write throttle's tunables are changed live with `tarn tunable set`.
#
#   bench/tuning-loop.sh [WORKDIR]          (default /tmp/tarn-tuning)
#
# The pool is one file imported with the hidden `--device-bandwidth` (every
# device write is paced to BW, default 100M/s), and the load is the hidden
# `pool write-test`: 16 writers of 1 MiB, BYTES (default 768M) per step,
# generated inside the daemon. Each step prints the settings, the
# write-test's own figure, `pool iostat -q` samples taken during the load
# (async-write queue depth: pending and active), `pool explain` over the
# middle of the load, and the txgs synced during the step with their
# delayed/stalled transaction counts. Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/tarn-tuning}"
BW="${BW:-100M}"
BYTES="${BYTES:-768M}"
if [ -z "${TARN:-}" ]; then
  cargo build --release -q -p tarn-cli
  TARN="$PWD/target/release/tarn"
fi
T="$TARN"
mkdir -p "$DIR"
export TARN_CACHE="$DIR/tarn.cache" TARN_SOCKET="$DIR/tarn.sock"
"$T" daemon stop >/dev/null 2>&1 || true
rm -f "$DIR"/pool.img "$TARN_CACHE" "$DIR"/tarn.log
trap '"$T" daemon stop >/dev/null 2>&1 || true' EXIT

"$T" pool create -m none -O compression=off tank "$DIR/pool.img" --size 4G
"$T" pool export tank
"$T" pool import -d "$DIR" -m none --device-bandwidth "$BW" tank

step() { # title, then NAME=VALUE settings applied live before the load
  local title="$1"; shift
  for s in "$@"; do "$T" tunable set "$s"; done
  local last
  last=$("$T" pool txgs --json tank | python3 -c "import json,sys; t=json.load(sys.stdin); print(max([r['txg'] for r in t] or [0]))")
  echo "### $title"
  echo
  echo '```'
  for n in zfs_dirty_data_max zfs_delay_scale zfs_vdev_async_write_min_active zfs_vdev_async_write_max_active; do
    echo "$n = $("$T" tunable get $n)"
  done
  "$T" pool write-test tank --bytes "$BYTES" --bs 1M --jobs 16 > "$DIR/wt.out" &
  local wt=$!
  sleep 0.5
  echo
  echo '$ tarn pool iostat -q -y tank 1 3      # during the load'
  "$T" pool iostat -q -y tank 1 3 | awk 'NR==1 || $1=="tank" {print $1, $5, $7, $(NF-1), $NF}' | column -t
  echo
  echo '$ tarn pool explain tank 1'
  "$T" pool explain tank 1
  wait "$wt"
  echo
  echo "write-test: $(cat "$DIR/wt.out")"
  echo
  echo '$ tarn pool txgs tank                  # txgs synced during the step'
  "$T" pool txgs tank | awk -v last="$last" 'NR==1 || $1+0 > last'
  echo '```'
  echo
}

echo "## Tuning loop (issue 4): bench/tuning-loop.sh, device paced to $BW/s, 16 writers x 1 MiB, $BYTES per step"
echo
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC')."
echo
step "1. Defaults, but zfs_dirty_data_max=256M" zfs_dirty_data_max=256M
step "2. zfs_delay_scale=10ms (1e9 / the device's 100 writes/s)" zfs_delay_scale=10000000
step "3. zfs_dirty_data_max=64M" zfs_dirty_data_max=64M
step "4. zfs_vdev_async_write_min_active=1, zfs_vdev_async_write_max_active=1" zfs_vdev_async_write_min_active=1 zfs_vdev_async_write_max_active=1
