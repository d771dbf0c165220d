#!/usr/bin/env bash
# The L2ARC experiment (issue 4): random 16 KiB reads over 1 GiB with a
# 32 MiB ARC, the pool's device slowed by 2 ms per operation; without and
# with a cache device (a file on the same disk, no added latency), once warm,
# and with the warm-up followed by an export/import (persistent L2ARC).
set -euo pipefail
cd "$(dirname "$0")/.."; cargo build --release -q -p tarn-cli; T="$PWD/target/release/tarn"
D="${ARC_EXP_DIR:-/var/tmp/tarn-arc-exp}"; mkdir -p "$D"; export TARN_CACHE=$D/l2.cache TARN_SOCKET=$D/l2.sock

rm -f $D/l2a.img $D/l2c.img $TARN_CACHE
$T pool create -m none -O recordsize=16K -O compression=off tank $D/l2a.img --size 4G >/dev/null
$T daemon stop >/dev/null 2>&1 || true
truncate -s 2G $D/l2c.img
tun="--tunable zfs_arc_max=32M --tunable zfs_arc_min=16M --tunable zfs_prefetch_disable=1"
common="--workload randread --size 1G --bs 16K --threads 16 --device-latency 2ms --ops 1500 --warmup-ops ${WARMUP:-8000} --json"
show() { python3 -c "import json,sys;r=json.load(open('$1'));print('%-28s reads/s %6.0f  p50 %5d us  dm%% %5.1f  mm%% %4.1f  l2 hits %6d misses %6d  l2 size %4d MiB  feeds %d' % ('$2', r['ops_per_s'], r['lat_us_p50'], r['arc_data_miss_pct'], r['arc_metadata_miss_pct'], r['l2_hits'], r['l2_misses'], r['l2_size']>>20, r['l2_feeds']))"; }
$T $tun bench tank $common > $D/l2-none.json; show $D/l2-none.json "no cache device"
rm -f $D/l2c.img; truncate -s 2G $D/l2c.img; $T $tun bench tank $common --cache-device $D/l2c.img > $D/l2-warm.json; show $D/l2-warm.json "cache device, warm"
$T pool remove tank $D/l2c.img >/dev/null 2>&1 || true; $T daemon stop >/dev/null 2>&1 || true
rm -f $D/l2c.img; truncate -s 2G $D/l2c.img; $T $tun bench tank $common --cache-device $D/l2c.img --reimport-after-warmup > $D/l2-reimport.json; show $D/l2-reimport.json "cache device, after import"
