#!/usr/bin/env bash
# Issue 2 benchmarks: tarn's pool core against fio on the same disk, in one run.
#
#   bench/pool-core.sh [WORKDIR] [SIZE]      (defaults: /tmp/tarn-bench, 4G)
#
# Every figure is the median of REPS runs (default 3), with tarn and fio runs
# interleaved so both see the same machine; absolute numbers on shared machines
# are noisy, the ratios are what to read. Prints a markdown report.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/tarn-bench}"
SIZE="${2:-8G}"
REPS="${REPS:-5}"
command -v fio >/dev/null || { echo "fio is required (apt-get install fio)" >&2; exit 1; }
cargo build --release -q -p tarn-cli
T="$PWD/target/release/tarn"
mkdir -p "$DIR"
export TARN_CACHE="$DIR/tarn.cache"
"$T" pool destroy bench 2>/dev/null || true
rm -f "$DIR"/pool.img "$DIR"/fio.img "$TARN_CACHE"
bytes=$(python3 -c "import sys;u={'K':1<<10,'M':1<<20,'G':1<<30};s=sys.argv[1];print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$SIZE")
poolsize=$(( bytes * 3 / 2 + (512 << 20) ))
"$T" pool create bench "$DIR/pool.img" --size "$poolsize"

jsonfield() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
fio_bw() { # rw -> MiB/s
  fio --name=b --filename="$DIR/fio.img" --size="$SIZE" --bs=1M --rw="$1" --direct=1 \
      --ioengine=psync --end_fsync=1 --output-format=json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; k='write' if '$1'=='write' else 'read'; print(j[k]['bw']/1024)"
}
tarn_bw() { # workload compression -> MiB/s
  "$T" bench bench --workload "$1" --size "$SIZE" --recordsize 1M --compression "$2" --json | jsonfield mib_per_s
}
median() { python3 -c "import sys,statistics; print('%.0f' % statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

fw=(); fr=(); tw0=(); tw4=(); tr=()
for i in $(seq "$REPS"); do
  fw+=("$(fio_bw write)"); tw0+=("$(tarn_bw seqwrite off)"); tw4+=("$(tarn_bw seqwrite lz4)")
  fr+=("$(fio_bw read)"); tr+=("$(tarn_bw seqread off)")
done
FW=$(median "${fw[@]}"); FR=$(median "${fr[@]}"); TW0=$(median "${tw0[@]}"); TW4=$(median "${tw4[@]}"); TR=$(median "${tr[@]}")
ratio() { python3 -c "print('%.2f' % ($1/$2))"; }

echo "## Sequential I/O, 1 MiB records, $SIZE, median of $REPS (MiB/s)"
echo
echo "| workload | fio --direct=1 | tarn | tarn / fio |"
echo "|---|---|---|---|"
echo "| write (compression=off) | $FW | $TW0 | $(ratio "$TW0" "$FW") |"
echo "| write (compression=lz4, incompressible data) | $FW | $TW4 | $(ratio "$TW4" "$FW") |"
echo "| cold read | $FR | $TR | $(ratio "$TR" "$FR") |"
echo
echo "lz4 / off on incompressible data: $(ratio "$TW4" "$TW0") (runs: off ${tw0[*]}; lz4 ${tw4[*]}; fio write ${fw[*]}; fio read ${fr[*]}; tarn read ${tr[*]})"
echo

echo "## Write throttle: 16 writers of 1 MiB overdriving a device slowed to 100 MiB/s (zfs_dirty_data_max=256M)"
echo
echo "The device takes 100 writes/s, so zfs_delay_scale = 1e9 / 100 = 10 ms puts the"
echo "steady point mid-curve (OpenZFS's guidance); the OpenZFS default (500 us, for"
echo "~2000 writes/s) is shown too: it settles near the top of the curve."
echo
echo "| throttle | MiB/s | p50 us | p99 us | p99.9 us | max us | delayed | at limit | dirty (2nd half mean) |"
echo "|---|---|---|---|---|---|---|---|---|"
throttle_row() { # label extra-tunables...
  local label="$1"; shift
  "$T" --tunable zfs_dirty_data_max=256M "$@" bench bench --workload seqwrite --threads 16 --size 1G \
     --recordsize 1M --device-bandwidth 100M --sample-ms 100 --json |
  python3 -c "
import json,sys
r=json.load(sys.stdin); s=r['dirty_samples']; t=s[len(s)//2:]
m=sum(x[1] for x in t)/max(1,len(t))*100/r['dirty_max']
print('| $label | %.0f | %d | %d | %d | %d | %d | %d | %.0f%% |' % (r['mib_per_s'], r['lat_us_p50'], r['lat_us_p99'], r['lat_us_p999'], r['lat_us_max'], r['throttle_delayed'], r['throttle_over_max'], m))"
}
throttle_row "on, zfs_delay_scale=10ms" --tunable zfs_delay_scale=10000000
throttle_row "on, zfs_delay_scale=500us (default)"
throttle_row "effectively off (zfs_delay_min_dirty_percent=100)" --tunable zfs_delay_min_dirty_percent=100
echo
"$T" --tunable zfs_dirty_data_max=256M bench bench --workload seqwrite --threads 16 --size 512M --recordsize 1M \
   --device-bandwidth 100M --rate 50M --json |
python3 -c "import json,sys; r=json.load(sys.stdin); print('Below the device bandwidth (16 writers offering 50 MiB/s): %d delayed, p99 %d us.' % (r['throttle_delayed'], r['lat_us_p99']))"
echo
echo "Dirty data over time (on with scale 10 ms, then off), each character 1/60 of the run, height = share of zfs_dirty_data_max:"
echo '```'
for extra in "--tunable zfs_delay_scale=10000000" "--tunable zfs_delay_min_dirty_percent=100"; do
  # shellcheck disable=SC2086
  "$T" --tunable zfs_dirty_data_max=256M $extra bench bench --workload seqwrite --threads 16 --size 1G \
     --recordsize 1M --device-bandwidth 100M --sample-ms 50 | grep "dirty/max"
done
echo '```'
echo

echo "## Small objects: 100,000 objects of 1 KiB (incompressible), one transaction each"
echo
"$T" bench bench --workload smallobj --objects 100000 --json | python3 -c "
import json,sys; r=json.load(sys.stdin)
print('| objects/s | objects per physical write | bytes allocated per 1 KiB object |')
print('|---|---|---|')
print('| %.0f | %.1f | %.0f |' % (r['ops_per_s'], r['ops_per_device_write'], r['bytes_allocated_per_object']))"
"$T" inspect bench --verify | head -1
"$T" pool destroy bench
rm -f "$DIR"/pool.img "$DIR"/fio.img
