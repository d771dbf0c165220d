#!/usr/bin/env bash
# The ARC-sizing experiment (issue 4), in-process with `tarn bench`: a
# dataset with recordsize 16K holding 1 GiB (32x the larger ARC), random
# 16 KiB reads from 16 threads, with zfs_arc_max below (4M) and above (32M)
# the 10 MiB of indirect blocks the bench objects have. Reports reads/s,
# demand data and metadata miss % (arcstat's dm% and mm%) of the timed
# phase, after an untimed warm-up of the same size.
set -euo pipefail
cd "$(dirname "$0")/.."; cargo build --release -q -p tarn-cli; T="$PWD/target/release/tarn"
D="${ARC_EXP_DIR:-/var/tmp/tarn-arc-exp}"; mkdir -p "$D"; export TARN_CACHE=$D/tarn.cache TARN_SOCKET=$D/tarn.sock

rm -f $D/a.img $D/c.img $TARN_CACHE
$T daemon stop >/dev/null 2>&1 || true
$T pool create -m none -O recordsize=16K -O compression=off tank $D/a.img --size 4G >/dev/null
$T daemon stop >/dev/null
common="--workload randread --size 1G --bs 16K --threads 16 --keep"
for arc in 4M 32M; do
  echo "== ARC $arc, no latency"
  $T --tunable zfs_arc_max=$arc --tunable zfs_arc_min=4M --tunable zfs_prefetch_disable=1 bench tank $common --ops 4000 --warmup-ops 4000 --json > $D/arc-$arc.json
  python3 -c "import json;r=json.load(open('$D/arc-$arc.json'));print('reads/s %.0f  dm%% %.1f  mm%% %.1f  arc %d MiB (meta %d MiB)  objects metadata %d MiB' % (r['ops_per_s'], r['arc_data_miss_pct'], r['arc_metadata_miss_pct'], r['arc_size']>>20, r['arc_metadata_size']>>20, r['objects_metadata_bytes']>>20))"
done
