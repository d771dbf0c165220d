#!/usr/bin/env bash
# Dataset commands at scale: does a command cost the same with 20,000
# datasets and 20,000 snapshots as with none? (The daemon serves one
# request at a time; each must stay O(1) or O(log n) in the dataset count.)
#
# Creates pool 'tank' on a sparse file and times one `tarn create`, one
# `tarn snapshot`, one `tarn get` and the first access to a new dataset
# (a `stat` of its directory inside the pool's mount, which opens it there)
# and to its snapshot (a `stat` under `.zfs/snapshot`), and batches: one
# `tarn create -p` of B names under a new parent and one `tarn snapshot` of
# those B datasets (destroyed again, untimed, so the probes do not grow the
# pool they measure); then creates N
# datasets tank/ci/job-NNNNN and N
# snapshots (batches of B names per command: one txg each) and times the
# same again — alternating with a second pool 'empty' that holds one
# dataset, so that both see the same load on a shared machine — and
# `tarn list -H -o name -t all` over everything. Prints each figure's
# median at the start, at the end, and on the small pool at the end, with
# the ratios end/start and full/small pool (≤ 1.5 is the goal).
#
# Usage: bench/datasets-scale.sh [N] [B]      (default 20000 500; ROUNDS=9 probes)
# Environment: TARN (binary, default target/release/tarn), BENCH_DIR
# (default /tmp/tarn-dsscale). Mounts need FUSE (the access figures are n/a
# without it).
set -euo pipefail
N=${1:-20000}
B=${2:-500}
R=${ROUNDS:-9}
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

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

us() { # microseconds a stat of $1 takes (n/a if it fails)
  local t0 t1
  t0=$(date +%s%N)
  if stat "$1" >/dev/null 2>>"$DIR/mount.err"; then t1=$(date +%s%N); echo $(( (t1 - t0) / 1000 )); else echo n/a; fi
}

probe() { # $1 = pool, $2 = tag: one create, snapshot, get and first accesses, appended to $DIR/t.$2.*
  local pool=$1 tag=$2 name="probe-$2-$RANDOM$RANDOM"
  ms "$TARN" create "$pool/$name" >>"$DIR/t.$tag.create"
  ms "$TARN" snapshot "$pool/$name@s" >>"$DIR/t.$tag.snapshot"
  ms "$TARN" get -H -o value used "$pool/ci/job-00000" >>"$DIR/t.$tag.get"
  us "$DIR/mnt-$pool/$name/." >>"$DIR/t.$tag.mount"
  us "$DIR/mnt-$pool/$name/.zfs/snapshot/s/." >>"$DIR/t.$tag.snapdir"
  local parent="$pool/batch-$2-$RANDOM$RANDOM" names=() snaps=() j
  for ((j = 0; j < B; j++)); do names+=("$parent/x$j"); snaps+=("$parent/x$j@s"); done
  ms "$TARN" create -p "${names[@]}" >>"$DIR/t.$tag.bcreate"
  ms "$TARN" snapshot "${snaps[@]}" >>"$DIR/t.$tag.bsnapshot"
  "$TARN" destroy -r "$parent" >/dev/null
}

result() { # $1 = tag: the medians "create snapshot get mount snapdir bcreate bsnapshot"
  local f out=""
  for f in create snapshot get mount snapdir bcreate bsnapshot; do out+="$(median <"$DIR/t.$1.$f") "; done
  echo "$out"
}

"$TARN" pool create -m "$DIR/mnt-tank" tank "$DIR/tank.img" --size 4G >/dev/null
"$TARN" pool create -m "$DIR/mnt-empty" empty "$DIR/empty.img" --size 1G >/dev/null
"$TARN" create -p tank/ci/job-00000 empty/ci/job-00000

# Warm up (the daemon's first requests load code and caches), then measure.
probe tank warm
for ((k = 0; k < R; k++)); do probe tank start; done
read -r c0 s0 g0 m0 z0 bc0 bs0 < <(result start)

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

for ((k = 0; k < R; k++)); do probe tank end; probe empty same; done
read -r c1 s1 g1 m1 z1 bc1 bs1 < <(result end)
read -r c2 s2 g2 m2 z2 bc2 bs2 < <(result same)
tl0=$(date +%s%N)
lines=$("$TARN" list -r -H -o name -t all tank | wc -l)
tl1=$(date +%s%N)

ratio() { if [[ $1 == n/a || $2 == n/a ]]; then echo n/a; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }'; fi; }
row() { printf '%-26s %7s %7s %9s   %9s %11s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4" "$(ratio "$4" "$3")"; }
echo "datasets-scale: $N datasets (tank/ci/job-NNNNN) + $N snapshots, batches of $B names per command; medians of $R"
echo "bulk: create $N in $((t1 - t0)) s, snapshot $N in $((t2 - t1)) s"
printf '%-26s %7s %7s %9s   %9s %11s\n' "ms" start end end/start "1-ds pool" full/small
row "tarn create" "$c0" "$c1" "$c2"
row "tarn snapshot" "$s0" "$s1" "$s2"
row "tarn get" "$g0" "$g1" "$g2"
row "first access (us)" "$m0" "$m1" "$m2"
row "first .zfs access (us)" "$z0" "$z1" "$z2"
row "tarn create ($B names)" "$bc0" "$bc1" "$bc2"
row "tarn snapshot ($B names)" "$bs0" "$bs1" "$bs2"
echo "tarn list -r -H -o name -t all tank: $(( (tl1 - tl0) / 1000000 )) ms, $lines lines"
if [[ $m1 == n/a || $z1 == n/a ]]; then echo "(access: $(tail -1 "$DIR/mount.err"))"; fi
t3=$(date +%s%N)
"$TARN" daemon stop >/dev/null
"$TARN" list -H -o name tank >/dev/null
t4=$(date +%s%N)
echo "daemon restart (import, mount the explicitly placed datasets) + first list: $(( (t4 - t3) / 1000000 )) ms"
