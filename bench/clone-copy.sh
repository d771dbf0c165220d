#!/usr/bin/env bash
# Block cloning through a real mount: `cp` (coreutils >= 9 copies with
# copy_file_range, which tarn serves by sharing whole records through its
# block reference table) against a plain copy of the same file (`dd`: read
# and write), each followed by an fsync of the copy, with the pool's
# allocated space before and after. `cp --reflink=always` cannot work over
# FUSE (no FICLONE); plain `cp` is what clones here.
#
# Creates pool 'tank' (compression off) on a sparse file, writes SIZE MiB of
# random data to a file with an fsync, then: cp a b; sync b — and dd a c;
# sync c. Prints times, allocated bytes, the block cloning properties and
# the ratios clone/copy, and checks both copies byte for byte.
#
# Usage: bench/clone-copy.sh [SIZE_MIB]      (default 1024)
# Environment: TARN (binary, default target/release/tarn), BENCH_DIR
# (default /tmp/tarn-clonebench). Needs FUSE (/dev/fuse).
set -euo pipefail
MIB=${1:-1024}
TARN=${TARN:-target/release/tarn}
DIR=${BENCH_DIR:-/tmp/tarn-clonebench}
export TARN_CACHE=$DIR/tarn.cache TARN_SOCKET=$DIR/tarn.sock
"$TARN" daemon stop >/dev/null 2>&1 || true
rm -rf "$DIR" && mkdir -p "$DIR"
trap '"$TARN" pool destroy tank >/dev/null 2>&1 || true; "$TARN" daemon stop >/dev/null 2>&1 || true; rm -f "$DIR/tank.img"' EXIT

M=$DIR/mnt
"$TARN" pool create -m "$M" -O compression=off tank "$DIR/tank.img" --size $((MIB * 4 + 1024))M >/dev/null
alloc() { "$TARN" pool get -H -p -o value allocated tank; }
ms() { echo $(( ($2 - $1) / 1000000 )); }

dd if=/dev/urandom of="$M/a" bs=1M count="$MIB" conv=fsync status=none
a0=$(alloc)

t0=$(date +%s%N)
cp "$M/a" "$M/b"
sync "$M/b"
t1=$(date +%s%N)
a1=$(alloc)

t2=$(date +%s%N)
dd if="$M/a" of="$M/c" bs=1M conv=fsync status=none
t3=$(date +%s%N)
a2=$(alloc)

cmp "$M/a" "$M/b"
cmp "$M/a" "$M/c"
props=$("$TARN" pool get -H -o property,value bcloneused,bclonesaved,bcloneratio tank | tr '\t\n' '= ')

clone_ms=$(ms "$t0" "$t1")
copy_ms=$(ms "$t2" "$t3")
clone_bytes=$((a1 - a0))
copy_bytes=$((a2 - a1))
printf '%-28s %10s %16s\n' "" "time (ms)" "allocated (B)"
printf '%-28s %10s %16s\n' "cp a b (copy_file_range)" "$clone_ms" "$clone_bytes"
printf '%-28s %10s %16s\n' "dd a c (read + write)" "$copy_ms" "$copy_bytes"
awk -v a="$clone_ms" -v b="$copy_ms" -v c="$clone_bytes" -v d="$copy_bytes" \
  'BEGIN { printf "clone/copy: time %.4f, space %.6f\n", a / (b ? b : 1), c / (d ? d : 1) }'
echo "$props"
# How cp copied (after the measurements: strace slows what it traces).
if command -v strace >/dev/null; then
  strace -f -e trace=copy_file_range,ioctl -o "$DIR/cp.strace" cp "$M/a" "$M/d"
  echo "cp's calls: $(grep -c 'copy_file_range(' "$DIR/cp.strace") copy_file_range," \
    "$(grep -c 'FICLONE' "$DIR/cp.strace") FICLONE (refused over FUSE: $(grep -m1 -o 'FICLONE.*= -1 [A-Z]*' "$DIR/cp.strace" || echo none))"
fi
