#!/usr/bin/env bash
# Dataset commands at scale: does a command cost the same with 20,000
# datasets and 20,000 snapshots as with none? (The daemon serves one
# request at a time; each must stay O(1) or O(log n) in the dataset count.)
#
# Creates pool 'tank' on a sparse file, times one `tarn create`, one
# `tarn snapshot`, one `tarn get` and the first access to a dataset's mount
# (`tarn mount` + `stat`), then creates N datasets tank/ci/job-NNNNN and N
# snapshots (batches of B names per command: one txg each), times the same
# four again, and `tarn list -H -o name` over everything. Prints each
# figure at the start and at the end and their ratio (≤ 1.5 is the goal).
#
# Usage: bench/datasets-scale.sh [N] [B]      (default 20000 500)
# Environment: TARN (binary, default target/release/tarn), BENCH_DIR
# (default /tmp/tarn-dsscale). Mounts need FUSE; without a POSIX layer on
# this branch, a release build cannot mount datasets — run a debug build
# with TARN_TEST_MEMFS=1 (MemFs served; the mount machinery is real).
set -euo pipefail
N=${1:-20000}
B=${2:-500}
TARN=${TARN:-target/release/tarn}
DIR=${BENCH_DIR:-/tmp/tarn-dsscale}
export TARN_CACHE=$DIR/tarn.cache TARN_SOCKET=$DIR/tarn.sock
"$TARN" daemon stop >/dev/null 2>&1 || true
rm -rf "$DIR" && mkdir -p "$DIR"
trap '"$TARN" daemon stop >/dev/null 2>&1 || true' EXIT

ms() { # milliseconds one command takes
  local t0 t1
  t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}

"$TARN" pool create -m "$DIR/mnt" tank "$DIR/tank.img" --size 4G >/dev/null
"$TARN" create tank/ci tank/ci/job-00000

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

measure() { # $1 = tag; prints "create snapshot get mount", each the median of 5 runs, in ms
  local tag=$1 k c=() s=() g=() m=() t0 t1
  for k in 1 2 3 4 5; do
    c+=("$(ms "$TARN" create "tank/probe-$tag-$k")")
    s+=("$(ms "$TARN" snapshot "tank/probe-$tag-$k@s")")
    g+=("$(ms "$TARN" get -H -o value used "tank/ci/job-00000")")
    t0=$(date +%s%N)
    if "$TARN" mount "tank/probe-$tag-$k" >/dev/null 2>"$DIR/mount.err" && stat "$DIR/mnt/probe-$tag-$k/." >/dev/null; then
      t1=$(date +%s%N); m+=("$(( (t1 - t0) / 1000000 ))")
      "$TARN" unmount "tank/probe-$tag-$k"
    else
      m+=(n/a)
    fi
  done
  echo "$(printf '%s\n' "${c[@]}" | median) $(printf '%s\n' "${s[@]}" | median) $(printf '%s\n' "${g[@]}" | median) $(printf '%s\n' "${m[@]}" | median)"
}

# Warm up (the daemon's first requests load code and caches), then measure.
measure warm >/dev/null
read -r c0 s0 g0 m0 < <(measure start)

t0=$(date +%s)
for ((i = 1; i < N; i += B)); do
  names=()
  for ((j = i; j < i + B && j < N; j++)); do names+=("$(printf 'tank/ci/job-%05d' "$j")"); done
  "$TARN" create -p "${names[@]}"
done
t1=$(date +%s)
for ((i = 0; i < N; i += B)); do
  names=()
  for ((j = i; j < i + B && j < N; j++)); do names+=("$(printf 'tank/ci/job-%05d@build' "$j")"); done
  "$TARN" snapshot "${names[@]}"
done
t2=$(date +%s)

read -r c1 s1 g1 m1 < <(measure end)
tl0=$(date +%s%N)
lines=$("$TARN" list -H -o name -t all | wc -l)
tl1=$(date +%s%N)

ratio() { if [[ $1 == n/a || $2 == n/a ]]; then echo n/a; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }'; fi; }
echo "datasets-scale: $N datasets (tank/ci/job-NNNNN) + $N snapshots, batches of $B names per command"
echo "bulk: create ${N} in $((t1 - t0)) s, snapshot ${N} in $((t2 - t1)) s"
printf '%-22s %10s %10s %7s\n' "command (ms)" start end ratio
printf '%-22s %10s %10s %7s\n' "tarn create" "$c0" "$c1" "$(ratio "$c0" "$c1")"
printf '%-22s %10s %10s %7s\n' "tarn snapshot" "$s0" "$s1" "$(ratio "$s0" "$s1")"
printf '%-22s %10s %10s %7s\n' "tarn get" "$g0" "$g1" "$(ratio "$g0" "$g1")"
printf '%-22s %10s %10s %7s\n' "first mount access" "$m0" "$m1" "$(ratio "$m0" "$m1")"
echo "tarn list -H -o name -t all: $(( (tl1 - tl0) / 1000000 )) ms, $lines lines"
if [[ $m1 == n/a ]]; then echo "(mount: $(cat "$DIR/mount.err"))"; fi
