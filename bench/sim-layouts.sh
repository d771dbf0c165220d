#!/usr/bin/env bash
# Issue 12: the seed's pool on simulated hardware. `tarn bench --simulate`
# on 2 × RAID-Z2 and on mirrors of 2, at 6, 12 and 24 devices: sequential
# write and read as % of the data devices' bandwidth, random-read IOPS.
#
#   bench/sim-layouts.sh            (REPS=3 THREADS=4 by default)
#   SWEEP=1 bench/sim-layouts.sh    also: 2 × RAID-Z2 of 12 at rising
#                                   device bandwidth (SWEEP_BW, 1T = devices
#                                   without limits), to find where the CPU
#                                   becomes the limit
#
# Every measurement is repeated REPS times, the repeats interleaved (one
# round of every cell, then the next round), so load from elsewhere on the
# machine spreads over all cells; medians and min–max spreads. Nothing is
# written to disk: the devices are memory (at most a few GiB; the bench
# refuses a size that does not fit).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-3}"
THREADS="${THREADS:-4}"
RR_THREADS="${RR_THREADS:-32}"
RR_OPS="${RR_OPS:-400}"
cargo build --release -q -p tarn-cli
T="$PWD/target/release/tarn"
DIR=$(mktemp -d /tmp/tarn-sim.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
export TARN_CACHE="$DIR/cache" TARN_SOCKET="$DIR/sock"

LAYOUTS=("2x raidz2 3" "2x raidz2 6" "2x raidz2 12" "3x mirror 2" "6x mirror 2" "12x mirror 2")
# Sequential data set: 256 MiB per 6 devices (1 GiB on 24), so every
# layout runs for a few seconds.
size_for() { case "$1" in *" 3"|"3x"*) echo 256M ;; *" 6"|"6x"*) echo 512M ;; *) echo 1G ;; esac; }
# One run: LAYOUT WORKLOAD [extra bench options] → one JSON line in $DIR/runs.
run() {
  local layout="$1" wl="$2"; shift 2
  local opts=(--simulate "$layout" --workload "$wl" --json --compression off)
  case "$wl" in
    seq*) opts+=(--threads "$THREADS" --recordsize 1M --size "$(size_for "$layout")") ;;
    randread) opts+=(--threads "$RR_THREADS" --recordsize 128K --bs 4K --ops "$RR_OPS" --size 256M --primarycache metadata) ;;
  esac
  "$T" bench "${opts[@]}" "$@" | python3 -c "
import json, sys
r = json.load(sys.stdin); s = r['simulated']
print(json.dumps({'layout': s['layout'], 'workload': r['workload'], 'bw': s['device_bandwidth'], 'mib': r['mib_per_s'],
  'iops': r['ops_per_s'], 'pct': s['pct_of_data_bandwidth'], 'busy': s['pct_of_device_bandwidth'], 'data_mib': s['data_mib_per_s'], 'devices': s['devices'],
  'data_devices': s['data_devices'], 'arc_miss': r['arc_data_miss_pct']}))" >> "$DIR/runs"
}

for rep in $(seq "$REPS"); do
  for l in "${LAYOUTS[@]}"; do
    for wl in seqwrite seqread randread; do
      run "$l" "$wl"
    done
  done
  if [ -n "${SWEEP:-}" ]; then
    for bw in ${SWEEP_BW:-20M 26M 40M 60M 1T}; do
      for wl in seqwrite seqread; do
        if [ "$bw" = 1T ]; then
          run "2x raidz2 12" "$wl" --device-bandwidth 1T --device-iops 100000000 --device-latency 0us
        else
          run "2x raidz2 12" "$wl" --device-bandwidth "$bw"
        fi
      done
    done
  fi
  echo "round $rep of $REPS done" >&2
done

python3 - "$DIR/runs" <<'EOF'
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def cell(rs, key, fmt='%.0f'):
    v = [r[key] for r in rs]
    return (fmt + ' (' + fmt + '–' + fmt + ')') % (st.median(v), min(v), max(v))
groups = {}
for r in runs:
    groups.setdefault((r['layout'], r['workload'], r['bw']), []).append(r)
print('| layout | devices | workload | data devices | their MiB/s | MiB/s | % of data devices | devices busy % | IOPS |')
print('|---|---:|---|---:|---:|---:|---:|---:|---:|')
for (layout, wl, bw), rs in groups.items():
    r0 = rs[0]
    bwtxt = '' if bw == 13 << 20 else ' @ %s' % ('%d MiB/s' % (bw >> 20) if bw < 1 << 40 else 'no device limits')
    iops = cell(rs, 'iops') if wl == 'randread' else ''
    mib = cell(rs, 'mib') if wl != 'randread' else ''
    pct = cell(rs, 'pct', '%.1f') if wl != 'randread' else ''
    lim = bw < 1 << 40
    print('| %s%s | %d | %s | %d | %s | %s | %s | %s | %s |' % (layout, bwtxt, r0['devices'], wl, r0['data_devices'], '%.0f' % r0['data_mib'] if lim else '—',
        mib, pct if lim else '—', cell(rs, 'busy', '%.1f') if lim else '—', iops))
EOF
