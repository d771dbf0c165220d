#!/usr/bin/env bash
# The ARC experiments (issue 4), in-process with `tarn bench`.
#
# bench/arc-exp.sh            ARC sizing: a dataset with recordsize 16K
#   holding 4 GiB (32x the largest ARC), compression off, random 16 KiB reads
#   from 16 threads, with zfs_arc_max below (4M) and above (32M, 128M) the
#   ~8 MiB the bench objects' indirect blocks take as held (compressed; 32
#   MiB decompressed). Reports reads/s, demand data and metadata miss %
#   (arcstat's dm% and mm%) of the timed phase, after an untimed warm-up of
#   the same size.
# bench/arc-exp.sh compressed  Compressed ARC: 256 MiB of lz4-compressible
#   data (lz4 keeps ~45 %) in 16K records, zfs_arc_max=192M — below the
#   logical size, above the compressed one — random 16 KiB reads after a
#   warm-up that touches every block; then the same reads with a 1 GiB ARC
#   (every read a hit: the cost of decompressing on a hit) and a cold
#   sequential read of 1 GiB of the same data.
#
# TARN=path/to/tarn runs another build (e.g. the one before a change).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TARN:-}" ]; then cargo build --release -q -p tarn-cli; T="$PWD/target/release/tarn"; else T="$TARN"; fi
D="${ARC_EXP_DIR:-/var/tmp/tarn-arc-exp}"; mkdir -p "$D"; export TARN_CACHE=$D/tarn.cache TARN_SOCKET=$D/tarn.sock
mode="${1:-sizing}"

rm -f $D/a.img $D/c.img $TARN_CACHE
$T daemon stop >/dev/null 2>&1 || true
show='import json,sys
r=json.load(open(sys.argv[1]))
z=lambda k: r.get(k,0)>>20
print("%-34s reads/s %6.0f  p50 %4d us  dm%% %5.1f  mm%% %5.1f  arc %4d MiB (meta %3d MiB; compressed %4d of %4d MiB logical, overhead %2d MiB)" % (sys.argv[2], r["ops_per_s"], r["lat_us_p50"], r["arc_data_miss_pct"], r["arc_metadata_miss_pct"], z("arc_size"), z("arc_metadata_size"), z("arc_compressed_size"), z("arc_uncompressed_size"), z("arc_overhead_size")))'
case "$mode" in
sizing)
  common="--workload randread --size 4G --bs 16K --threads 16"
  for arc in 4M 32M 128M; do
    # A fresh pool each time: the previous run's frees are deferred.
    $T daemon stop >/dev/null 2>&1 || true; rm -f $D/a.img $TARN_CACHE
    $T pool create -m none -O recordsize=16K -O compression=off tank $D/a.img --size 6G >/dev/null
    $T daemon stop >/dev/null
    $T --tunable zfs_arc_max=$arc --tunable zfs_arc_min=4M --tunable zfs_prefetch_disable=1 bench tank $common --ops 4000 --warmup-ops 4000 --json > $D/arc-$arc.json
    python3 -c "$show" $D/arc-$arc.json "ARC $arc"
    python3 -c "import json;r=json.load(open('$D/arc-$arc.json'));print('%34s the objects\' metadata: %d MiB held, %d MiB decompressed' % ('', r.get('objects_metadata_bytes',0)>>20, r.get('objects_metadata_logical_bytes',0)>>20))"
  done
  ;;
compressed)
  $T pool create -m none -O recordsize=16K -O compression=lz4 tank $D/a.img --size 4G >/dev/null
  $T daemon stop >/dev/null
  rand="--workload randread --size 256M --bs 16K --threads 16 --compressible --keep --json"
  tun="--tunable zfs_prefetch_disable=1"
  $T $tun --tunable zfs_arc_max=192M --tunable zfs_arc_min=64M bench tank $rand --ops 4000 --warmup-ops 8000 > $D/c-192.json
  python3 -c "$show" $D/c-192.json "ARC 192M, random 16K"
  $T $tun --tunable zfs_arc_max=1G --tunable zfs_arc_min=64M bench tank $rand --ops 8000 --warmup-ops 8000 > $D/c-1g.json
  python3 -c "$show" $D/c-1g.json "ARC 1G (all hits), random 16K"
  $T pool destroy -f tank >/dev/null 2>&1 || true; $T daemon stop >/dev/null 2>&1 || true; rm -f $D/a.img $TARN_CACHE
  $T pool create -m none -O compression=lz4 tank $D/a.img --size 4G >/dev/null
  $T daemon stop >/dev/null
  $T bench tank --workload seqread --size 1G --threads 1 --compressible --json > $D/c-seq.json
  python3 -c "import json;r=json.load(open('$D/c-seq.json'));print('cold sequential read 1G, 128K records   %.0f MiB/s' % r['mib_per_s'])"
  ;;
*) echo "usage: $0 [sizing|compressed]" >&2; exit 2 ;;
esac
rm -f $D/a.img $TARN_CACHE
