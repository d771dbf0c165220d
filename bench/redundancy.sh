#!/usr/bin/env bash
# Issue 12 benchmarks: scrub and resilver of a 2-way mirror on image files,
# against fio reading the same files and cp copying the same bytes, and
# zfs-fuse scrubbing the same data on the same layout — in one run.
#
#   bench/redundancy.sh [WORKDIR] [SIZE]      (defaults: /tmp/tarn-redundancy, 4G)
#
# TARN=PATH runs that build of tarn instead of a fresh release build.
# REPS (default 3) runs of each measurement, interleaved; medians and
# min–max spreads. Page cache dropped before every timed step. Needs root
# (drop_caches), fio; zfs-fuse optional (skipped with a note if absent).
# Prints a markdown report.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/tarn-redundancy}"
SIZE="${2:-4G}"
REPS="${REPS:-3}"
command -v fio >/dev/null || { echo "fio is required (apt-get install fio)" >&2; exit 1; }
. bench/lib.sh
T="$(tarn_bin)" || exit 1
mkdir -p "$DIR"
export TARN_CACHE="$DIR/tarn.cache" TARN_SOCKET="$DIR/tarn.sock"
bytes=$(bytes_of "$SIZE")
imgsize=$(( bytes * 3 / 2 + (512 << 20) ))

cleanup() {
  "$T" pool destroy rb >/dev/null 2>&1 || true
  "$T" daemon stop >/dev/null 2>&1 || true
  rm -f "$DIR"/a.img "$DIR"/b.img "$TARN_CACHE"
}

# A mirror of a.img and b.img holding SIZE of incompressible data (128 KiB
# records), b.img offline while it was written if $1 = offline.
fill() {
  cleanup
  "$T" pool create -m none rb mirror "$DIR/a.img" "$DIR/b.img" --size "$imgsize" >/dev/null
  [ "${1:-}" = offline ] && "$T" pool offline rb "$DIR/b.img"
  "$T" daemon stop >/dev/null
  "$T" bench rb --workload seqwrite --size "$SIZE" --compression off --keep --json >/dev/null
}

scrub_ms() {
  drop; local t0; t0=$(ms)
  "$T" pool scrub -w rb
  echo $(( $(ms) - t0 ))
}

# fio: both images read sequentially at once (what a scrub of the mirror
# reads), the allocated part only; MiB/s in total.
# Both block sizes: on some hosts (these image files) a 1 MiB O_DIRECT read
# costs three times a 128 KiB one per byte, and the scrub reads 128 KiB.
fio_mib() {
  local bs best=0 got
  for bs in 1M 128k; do
    drop
    got=$(fio --name=a --filename="$DIR/a.img" --size="$SIZE" --bs=$bs --rw=read --direct=1 --ioengine=psync \
        --name=b --filename="$DIR/b.img" --size="$SIZE" --bs=$bs --rw=read --direct=1 --ioengine=psync \
        --group_reporting --output-format=json 2>/dev/null |
      python3 -c "import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index('{'):])['jobs'][0]; print(j['read']['bw']/1024)")
    best=$(python3 -c "print(max($best, ${got:-0}))")
  done
  echo "$best"
}

resilver_ms() {
  drop; local t0; t0=$(ms)
  "$T" pool online rb "$DIR/b.img"
  "$T" pool wait -t resilver rb
  echo $(( $(ms) - t0 ))
}

cp_ms() {
  head -c "$bytes" /dev/urandom > "$DIR/src.bin" 2>/dev/null || true
  drop; local t0; t0=$(ms)
  cp "$DIR/src.bin" "$DIR/dst.bin"; sync
  echo $(( $(ms) - t0 ))
  rm -f "$DIR/dst.bin" "$DIR/src.bin"
}

# zfs-fuse is started for the scrub if none runs, and stopped at the end
# (fs-compare refuses to touch a zfs-fuse it did not start).
ZFS_FUSE_BEFORE=$(pgrep -x zfs-fuse || true)

zfs_scrub_ms() {
  command -v zpool >/dev/null || { echo "-"; return; }
  pgrep -x zfs-fuse >/dev/null || { zfs-fuse >/dev/null 2>&1 && sleep 2; }
  zpool destroy zrb >/dev/null 2>&1 || true
  rm -f "$DIR"/za.img "$DIR"/zb.img
  truncate -s "$imgsize" "$DIR/za.img" "$DIR/zb.img"
  zpool create -f -m "$DIR/zmnt" zrb mirror "$DIR/za.img" "$DIR/zb.img"
  zfs set compression=off zrb
  head -c "$bytes" /dev/urandom > "$DIR/zmnt/data" ; sync
  zpool export zrb; zpool import -d "$DIR" zrb
  drop; local t0; t0=$(ms)
  zpool scrub zrb
  while zpool status zrb | grep -q "scrub in progress"; do sleep 0.2; done
  echo $(( $(ms) - t0 ))
  zpool destroy -f zrb || { sleep 2; zpool destroy -f zrb; }; rm -f "$DIR"/za.img "$DIR"/zb.img
}

sc=(); fi=(); rs=(); cpv=(); zs=()
for i in $(seq "$REPS"); do
  # One data set on the disk at a time (the images are sparse).
  fill
  sc+=("$(scrub_ms)")
  "$T" daemon stop >/dev/null
  fi+=("$(fio_mib)")
  cleanup
  zs+=("$(zfs_scrub_ms)")
  fill offline
  rs+=("$(resilver_ms)")
  cleanup
  cpv+=("$(cp_ms)")
done
cleanup
if [ -z "$ZFS_FUSE_BEFORE" ]; then
  for p in $(pgrep -x zfs-fuse || true); do kill "$p" 2>/dev/null || true; done
fi

scrub_mib=$(python3 -c "print(2*$bytes/1048576/($(med "${sc[@]}")/1000))")
echo "## Redundancy: scrub and resilver of a 2-way mirror holding $SIZE ($(date -u +%FT%TZ), $REPS runs, load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| measurement | median (min–max) |"
echo "|---|---|"
echo "| tarn scrub -w (ms), reads both children: 2 × $SIZE | $(median "${sc[@]}") |"
echo "| fio, both images sequentially at once, O_DIRECT, the faster of 1 MiB and 128 KiB reads (MiB/s) | $(median "${fi[@]}") |"
echo "| tarn resilver of $SIZE: online → wait -t resilver (ms) | $(median "${rs[@]}") |"
echo "| cp of $SIZE on the same disk, then sync (ms) | $(median "${cpv[@]}") |"
echo "| zfs-fuse scrub of $SIZE on a 2-way mirror of files (ms) | $(median "${zs[@]}") |"
echo
echo "Scrub rate: $(printf %.0f "$scrub_mib") MiB/s = $(python3 -c "print('%.2f' % ($scrub_mib/$(med "${fi[@]}")))")× fio's; resilver = $(python3 -c "print('%.2f' % ($(med "${rs[@]}")/$(med "${cpv[@]}")))")× cp's time; zfs-fuse scrub takes $( [ "${zs[0]}" = - ] && echo "-" || python3 -c "print('%.2f' % ($(med "${zs[@]}")/$(med "${sc[@]}")))")× tarn's time."
