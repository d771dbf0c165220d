#!/usr/bin/env bash
# Issue 12: sequential rebuild (attach -s) vs healing resilver (attach) of
# a new child of a 1-device pool holding SIZE, vs cp of the same bytes on
# the same disk — interleaved runs, medians.
#
#   bench/rebuild.sh [WORKDIR] [SIZE]      (defaults: /tmp/tarn-rebuild, 1G)
#
# REPS (default 3). The pool is written once (tarn bench seqwrite, 128 KiB
# incompressible records, --keep); each run attaches b.img (a new sparse
# file) with and without -s and times `attach -w` (which waits for the
# resilver, not the scrub a rebuild starts), then waits for that scrub
# and detaches b.img again. Page cache dropped before every timed step
# (needs root). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/tarn-rebuild}"
SIZE="${2:-1G}"
REPS="${REPS:-3}"
# FRAG_BS=16K: fill with small records rewritten at random instead (tarn
# bench randwrite --bs FRAG_BS --recordsize FRAG_BS --keep with zfs_dirty_data_max=64M, the
# recipe of scrub-raidz.sh): a fragmented vdev, the rebuild's best case.
FRAG_BS="${FRAG_BS:-}"
# TARN=PATH runs that build instead of building target/release/tarn;
# TUNABLES="NAME=VALUE ..." are set on the daemon before the runs.
. bench/lib.sh
T="$(tarn_bin)" || exit 1
mkdir -p "$DIR"
export TARN_CACHE="$DIR/tarn.cache" TARN_SOCKET="$DIR/tarn.sock"
bytes=$(bytes_of "$SIZE")
imgsize=$(( bytes * 3 / 2 + (512 << 20) ))

cleanup() {
  "$T" pool destroy rb >/dev/null 2>&1 || true
  "$T" daemon stop >/dev/null 2>&1 || true
  rm -f "$DIR"/a.img "$DIR"/b.img "$TARN_CACHE" "$DIR/tarn.tunables"
}

fill() {
  cleanup
  "$T" pool create -m none rb "$DIR/a.img" --size "$imgsize" >/dev/null
  "$T" daemon stop >/dev/null
  if [ -n "$FRAG_BS" ]; then
    "$T" --tunable zfs_dirty_data_max=64M bench rb --workload randwrite --bs "$FRAG_BS" --recordsize "$FRAG_BS" --threads 4 \
      --size "$SIZE" --compression off --keep --json >/dev/null
  else
    "$T" bench rb --workload seqwrite --size "$SIZE" --compression off --keep --json >/dev/null
  fi
  if [ -n "${TUNABLES:-}" ]; then "$T" tunable set $TUNABLES >/dev/null; fi
}

# attach_ms [-s]: time of `pool attach -w [-s]` of a fresh b.img; the
# resilver's bytes on stderr; then the scrub (if any) and a detach.
attach_ms() {
  rm -f "$DIR/b.img"; truncate -s "$imgsize" "$DIR/b.img"
  drop; local t0 t; t0=$(ms)
  "$T" pool attach -w "$@" rb "$DIR/a.img" "$DIR/b.img"
  t=$(( $(ms) - t0 ))
  "$T" pool status rb | grep "scan:" >&2
  "$T" pool wait -t scrub rb
  "$T" pool detach rb "$DIR/b.img"
  echo "$t"
}

cp_ms() {
  head -c "$bytes" /dev/urandom > "$DIR/src.bin"
  drop; local t0; t0=$(ms)
  cp "$DIR/src.bin" "$DIR/dst.bin"; sync "$DIR/dst.bin"
  echo $(( $(ms) - t0 ))
  rm -f "$DIR/dst.bin" "$DIR/src.bin"
}

fill
alloc=$("$T" pool list -Hp -o alloc rb 2>/dev/null || echo "?")
rb=(); hl=(); cpv=()
for i in $(seq "$REPS"); do
  rb+=("$(attach_ms -s)")
  hl+=("$(attach_ms)")
  cpv+=("$(cp_ms)")
done
cleanup

echo "## Sequential rebuild vs healing resilver, $SIZE${FRAG_BS:+ in $FRAG_BS records rewritten at random}${TUNABLES:+, $TUNABLES} ($(date -u +%FT%TZ), $REPS runs, load $(cut -d' ' -f1 /proc/loadavg), allocated $alloc)"
echo
echo "| measurement | median (min–max) |"
echo "|---|---|"
echo "| attach -s -w: sequential rebuild of $SIZE (ms) | $(median "${rb[@]}") |"
echo "| attach -w: healing resilver of $SIZE (ms) | $(median "${hl[@]}") |"
echo "| cp of $SIZE on the same disk, then sync (ms) | $(median "${cpv[@]}") |"
echo
echo "rebuild = $(python3 -c "print('%.2f' % ($(med "${rb[@]}")/$(med "${hl[@]}")))")× the healing resilver's time, $(python3 -c "print('%.2f' % ($(med "${rb[@]}")/$(med "${cpv[@]}")))")× cp's."
