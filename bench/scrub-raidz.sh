#!/usr/bin/env bash
# Issue 12 benchmarks beside bench/redundancy.sh, in one run:
#  1. scrub of a 2-way mirror of image files holding SIZE of fragmented
#     data, sorted (the default) against logical order (zfs_scan_legacy=1);
#     — and the same with a per-read delay injected (SEEK_MS, below);
#  2. random-read latency through the mount (fio randread 4 KiB, O_DIRECT,
#     one at a time) idle against during a sorted scrub;
#  3. RAID-Z2 of 6 image files, tarn against zfs-fuse on the same layout:
#     sequential write and read through the mount, and scrub time.
#
#   bench/scrub-raidz.sh [WORKDIR] [SIZE] [RZSIZE]
#                         (defaults: /tmp/tarn-scrub-raidz, 4G, 2G)
#
# The mirror's data is made as a database or VM image ends up on a
# copy-on-write pool: `tarn bench --workload randwrite --keep` writes four
# objects of SIZE/4 sequentially, then rewrites SIZE in random 128 KiB
# records with small txgs (zfs_dirty_data_max=64M, so a txg syncs every
# ~13 MiB): each rewritten record moves to where its txg allocated, so the
# records of an object in logical order lie all over the devices. Then a
# 1 GiB file is written through the mount for fio's random reads (the
# daemon's ARC capped at 64 MiB, so they reach the devices). The mirror is
# made once; its scrubs repeat REPS (default 3) times, interleaved. The
# RAID-Z2 pools are made anew in every repeat (tarn's, then zfs-fuse's, one
# set of images on the disk at a time). Page cache dropped before every
# timed step; each pool exported and imported before it is read (cold
# ARC). Medians and min–max spreads. Needs root (drop_caches), fio;
# zfs-fuse optional (skipped with a note if absent; stopped at the end if
# this script started it). Prints a markdown report.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/tarn-scrub-raidz}"
SIZE="${2:-4G}"
RZSIZE="${3:-2G}"
REPS="${REPS:-3}"
# Then once more, each mirror child made a disk that serves one read at a
# time for at least SEEK_MS ms (`tarn inject -D SEEK_MS:1 -T read`): a seek
# costs every read, as on a hard disk (0: skip).
SEEK_MS="${SEEK_MS:-4}"
# RAIDZ=0 skips part 3; TARN=PATH runs that build of tarn instead of
# building target/release/tarn (to compare two builds).
RAIDZ="${RAIDZ:-1}"
command -v fio >/dev/null || { echo "fio is required (apt-get install fio)" >&2; exit 1; }
. bench/lib.sh
T="$(tarn_bin)" || exit 1
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
export TARN_CACHE="$DIR/tarn.cache" TARN_SOCKET="$DIR/tarn.sock"
bytes=$(bytes_of "$SIZE")
rzbytes=$(bytes_of "$RZSIZE")
P99_FILE_MIB=1024
# (Every function's output is taken whole, `out=$(f)`, before it is read:
# `read < <(f)` would go on after f's first line while f still runs, and
# lose its exit status.)
# Mirror children: the data, its random rewrite's slack, the 1 GiB file.
imgsize=$(( bytes * 3 / 2 + (1536 << 20) ))
# RAID-Z2 of 6: 4 data columns, parity on top, slack.
rzimg=$(( rzbytes / 4 * 3 / 2 + (512 << 20) ))
disk=$(lsblk -no pkname "$(df --output=source "$DIR" | tail -1)" 2>/dev/null || true)
disk=${disk:-$(basename "$(df --output=source "$DIR" | tail -1)")}
median1() { python3 -c "import sys,statistics as s; v=[float(x) for x in sys.argv[1:]]; print('%.1f (%.1f–%.1f)' % (s.median(v), min(v), max(v)))" "$@"; }
ratio() { python3 -c "print('%.2f' % ($1/$2))"; }
# Reads completed and sectors read on the disk holding DIR.
diskreads() { awk -v d="$disk" '$3==d {print $4, $6}' /proc/diskstats; }

ZFS_STARTED=""
cleanup() {
  "$T" pool destroy rb >/dev/null 2>&1 || true
  "$T" pool destroy rz >/dev/null 2>&1 || true
  "$T" daemon stop >/dev/null 2>&1 || true
  if command -v zpool >/dev/null && pgrep -x zfs-fuse >/dev/null; then
    zpool destroy -f zrz >/dev/null 2>&1 || true
  fi
  if [ -n "$ZFS_STARTED" ]; then kill "$ZFS_STARTED" 2>/dev/null || true; fi
  rm -f "$DIR"/a.img "$DIR"/b.img "$DIR"/r?.img "$DIR"/z?.img "$TARN_CACHE" "$DIR/tarn.tunables"
}

# --- 1 and 2: the mirror --------------------------------------------------
make_mirror() {
  "$T" pool create -m "$DIR/mnt" -O compression=off rb mirror "$DIR/a.img" "$DIR/b.img" --size "$imgsize" >/dev/null
  "$T" daemon stop >/dev/null
  "$T" --tunable zfs_dirty_data_max=64M bench rb --workload randwrite --bs 128K --threads 4 \
    --size "$SIZE" --compression off --keep --json >/dev/null
  "$T" tunable set zfs_arc_max=64M >/dev/null 2>&1
  # TUNABLES="NAME=VALUE ...": set on the daemon before the scrubs.
  if [ -n "${TUNABLES:-}" ]; then "$T" tunable set $TUNABLES >/dev/null; fi
  dd if=/dev/urandom of="$DIR/mnt/p99.bin" bs=1M count=$P99_FILE_MIB conv=fsync status=none
}

# Times `pool scrub -w` in the order $1 (0 sorted, 1 logical); prints
# "ms MiB-read-from-disk average-read-KiB".
scrub_ms() {
  "$T" tunable set zfs_scan_legacy="$1" >/dev/null
  drop
  local r0 r1 t0 t1
  r0=$(diskreads); t0=$(ms)
  "$T" pool scrub -w "$2"
  t1=$(ms); r1=$(diskreads)
  python3 -c "
import sys; a=list(map(int,'$r0'.split())); b=list(map(int,'$r1'.split()))
ops=b[0]-a[0]; mib=(b[1]-a[1])*512/1048576
print($t1-$t0, '%.0f' % mib, '%.0f' % (mib*1024/max(ops,1)))"
}

# fio 4 KiB random reads, one at a time, O_DIRECT, of the 1 GiB file for
# $1 seconds; prints "p99_us p50_us iops".
randread() {
  fio --name=r --filename="$DIR/mnt/p99.bin" --rw=randread --bs=4k --direct=1 --ioengine=psync \
      --runtime="$1" --time_based --randrepeat=0 --output-format=json 2>/dev/null |
    python3 -c "
import json,sys; t=sys.stdin.read(); r=json.loads(t[t.index('{'):])['jobs'][0]['read']
p=r['clat_ns']['percentile']; print('%.0f %.0f %.0f' % (p['99.000000']/1000, p['50.000000']/1000, r['iops']))"
}

# The same while a sorted scrub runs: started, given 1 s to walk the tree,
# then fio for 6 s; prints the fio figures and whether the scrub was still
# running when fio ended ("overlap"), then waits for the scrub.
randread_during_scrub() {
  "$T" tunable set zfs_scan_legacy=0 >/dev/null
  drop
  "$T" pool scrub rb
  sleep 1
  local f; f=$(randread 6)
  if "$T" pool status rb | grep -q "scrub in progress"; then echo "$f overlap"; else echo "$f ended-early"; fi
  "$T" pool wait -t scrub rb
}

# --- 3: RAID-Z2 through the mount -------------------------------------------
# Sequential write of RZSIZE (1 MiB writes, then fsync) and, after an
# export and import (cold ARC) and a page-cache drop, sequential read, in
# the mounted directory $1; prints "write_MiB/s read_MiB/s".
seq_io() {
  local mnt="$1" t0 t1 w
  drop; t0=$(ms)
  fio --name=w --filename="$mnt/seq.bin" --rw=write --bs=1M --size="$RZSIZE" --ioengine=psync --end_fsync=1 >/dev/null 2>&1
  t1=$(ms)
  w=$(python3 -c "print('%.0f' % ($rzbytes/1048576/(($t1-$t0)/1000)))")
  "$2"                       # export and import: cold ARC
  drop
  local r
  r=$(fio --name=r --filename="$mnt/seq.bin" --rw=read --bs=1M --size="$RZSIZE" --ioengine=psync --output-format=json 2>/dev/null |
    python3 -c "import json,sys; t=sys.stdin.read(); print('%.0f' % (json.loads(t[t.index('{'):])['jobs'][0]['read']['bw']/1024))")
  echo "$w $r"
}

tarn_reimport() { "$T" pool export rz >/dev/null; "$T" pool import -d "$DIR" rz >/dev/null; }
zfs_reimport() { zpool export zrz; zpool import -d "$DIR" zrz; }

# tarn: "write read scrub_ms".
tarn_raidz() {
  rm -f "$DIR"/r?.img
  "$T" pool create -m "$DIR/tmnt" -O compression=off rz raidz2 "$DIR"/r{1..6}.img --size "$rzimg" >/dev/null
  local io s
  io=$(seq_io "$DIR/tmnt" tarn_reimport)
  s=$(scrub_ms 0 rz | cut -d' ' -f1)
  "$T" pool destroy rz >/dev/null
  rm -f "$DIR"/r?.img
  echo "$io $s"
}

# zfs-fuse: "write read scrub_ms", or "- - -" without it.
zfs_raidz() {
  command -v zpool >/dev/null || { echo "- - -"; return; }
  zpool destroy -f zrz >/dev/null 2>&1 || true
  rm -f "$DIR"/z?.img
  truncate -s "$rzimg" "$DIR"/z{1..6}.img
  zpool create -f -m "$DIR/zmnt" zrz raidz2 "$DIR"/z{1..6}.img
  zfs set compression=off zrz
  local io t0 t1
  io=$(seq_io "$DIR/zmnt" zfs_reimport)
  drop; t0=$(ms)
  zpool scrub zrz
  while zpool status zrz | grep -q "scrub in progress"; do sleep 0.2; done
  t1=$(ms)
  zpool destroy -f zrz || { sleep 2; zpool destroy -f zrz; }
  rm -f "$DIR"/z?.img
  echo "$io $(( t1 - t0 ))"
}

cleanup
trap cleanup EXIT
make_mirror
srt=(); lgc=(); srt_mib=(); lgc_mib=(); srt_kib=(); lgc_kib=()
idle=(); idle50=(); idle_iops=(); busy=(); busy50=(); busy_iops=(); overlap=()
for i in $(seq "$REPS"); do
  # Alternate which order goes first.
  for order in $( [ $((i % 2)) = 1 ] && echo "0 1" || echo "1 0"); do
    out=$(scrub_ms "$order" rb); read -r t m k <<< "$out"
    if [ "$order" = 0 ]; then srt+=("$t"); srt_mib+=("$m"); srt_kib+=("$k"); else lgc+=("$t"); lgc_mib+=("$m"); lgc_kib+=("$k"); fi
  done
  drop
  out=$(randread 6); read -r p99 p50 iops <<< "$out"
  idle+=("$p99"); idle50+=("$p50"); idle_iops+=("$iops")
  out=$(randread_during_scrub); read -r p99 p50 iops ov <<< "$out"
  busy+=("$p99"); busy50+=("$p50"); busy_iops+=("$iops"); overlap+=("$ov")
done
dst=-; dlt=-
if [ "$SEEK_MS" != 0 ]; then
  for d in a b; do "$T" inject -d "$DIR/$d.img" -D "$SEEK_MS:1" -T read rb >/dev/null; done
  out=$(scrub_ms 0 rb); read -r dst dsm dsk <<< "$out"
  out=$(scrub_ms 1 rb); read -r dlt dlm dlk <<< "$out"
  "$T" inject -c all >/dev/null
fi
"$T" pool destroy rb >/dev/null
rm -f "$DIR"/a.img "$DIR"/b.img
# RAID-Z2 with the ARC's default size again.
"$T" tunable reset zfs_arc_max zfs_arc_min >/dev/null
if [ "$RAIDZ" != 0 ] && command -v zpool >/dev/null && ! pgrep -x zfs-fuse >/dev/null; then
  zfs-fuse >/dev/null 2>&1; sleep 2
  ZFS_STARTED=$(pgrep -x zfs-fuse)
fi

tw=(); tr=(); ts=(); zw=(); zr=(); zs=()
for i in $(seq "$( [ "$RAIDZ" = 0 ] && echo 0 || echo "$REPS")"); do
  out=$(tarn_raidz); read -r w r s <<< "$out"; tw+=("$w"); tr+=("$r"); ts+=("$s")
  out=$(zfs_raidz); read -r w r s <<< "$out"; zw+=("$w"); zr+=("$r"); zs+=("$s")
done

echo "## Scrub order, latency during a scrub, RAID-Z2 against zfs-fuse ($(date -u +%FT%TZ), $REPS runs, load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "Mirror of 2 image files: $SIZE written by tarn bench randwrite --keep (fragmented), plus a ${P99_FILE_MIB} MiB file through the mount."
echo
echo "| measurement | median (min–max) |"
echo "|---|---|"
echo "| tarn scrub -w, sorted (ms) | $(median "${srt[@]}") |"
echo "| tarn scrub -w, logical order, zfs_scan_legacy=1 (ms) | $(median "${lgc[@]}") |"
echo "| disk reads during the sorted scrub: MiB, average KiB per read | $(median "${srt_mib[@]}"), $(median "${srt_kib[@]}") |"
echo "| disk reads during the logical scrub: MiB, average KiB per read | $(median "${lgc_mib[@]}"), $(median "${lgc_kib[@]}") |"
echo "| fio randread 4K O_DIRECT qd1 through the mount, idle: p99 µs, p50 µs, IOPS | $(median "${idle[@]}"), $(median "${idle50[@]}"), $(median "${idle_iops[@]}") |"
echo "| the same during a sorted scrub: p99 µs, p50 µs, IOPS | $(median "${busy[@]}"), $(median "${busy50[@]}"), $(median "${busy_iops[@]}") |"
echo "| scrub still running when fio ended | ${overlap[*]} |"
if [ "$dst" != - ]; then
  echo "| once, each child serving one read at a time, each ≥ $SEEK_MS ms (inject -D $SEEK_MS:1): sorted scrub (ms), MiB read, KiB per read | $dst, $dsm, $dsk |"
  echo "| the same, logical order (ms), MiB read, KiB per read | $dlt, $dlm, $dlk |"
fi
if [ "$RAIDZ" != 0 ]; then
echo
echo "RAID-Z2 of 6 image files, $RZSIZE through the mount (fio 1 MiB psync; write timed to the end of its fsync; read after export/import and a cache drop):"
echo
echo "| measurement | tarn | zfs-fuse |"
echo "|---|---|---|"
echo "| sequential write (MiB/s) | $(median "${tw[@]}") | $( [ "${zw[0]}" = - ] && echo - || median "${zw[@]}") |"
echo "| sequential read (MiB/s) | $(median "${tr[@]}") | $( [ "${zr[0]}" = - ] && echo - || median "${zr[@]}") |"
echo "| scrub of the $RZSIZE (ms) | $(median "${ts[@]}") | $( [ "${zs[0]}" = - ] && echo - || median "${zs[@]}") |"
fi
echo
[ "$dst" != - ] && echo "With $SEEK_MS ms a read: sorted is $(ratio "$dlt" "$dst")× faster than logical order."
echo "Sorted scrub is $(ratio "$(med "${lgc[@]}")" "$(med "${srt[@]}")")× faster than logical order; p99 during a scrub is $(ratio "$(med "${busy[@]}")" "$(med "${idle[@]}")")× idle."
if [ "$RAIDZ" != 0 ] && [ "${zw[0]}" != - ]; then
  echo "RAID-Z2: tarn writes $(ratio "$(med "${tw[@]}")" "$(med "${zw[@]}")")× and reads $(ratio "$(med "${tr[@]}")" "$(med "${zr[@]}")")× zfs-fuse's MiB/s; zfs-fuse's scrub takes $(ratio "$(med "${zs[@]}")" "$(med "${ts[@]}")")× tarn's time."
fi
