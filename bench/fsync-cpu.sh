#!/bin/bash
# Where the CPU goes in 4 KiB random writes each followed by fsync, one job
# against eight: is the eight-job rate bounded by the machine's cores?
#
#   bench/fsync-cpu.sh WORKDIR [REPS] [RUNTIME_S]
#
# For tarn (a pool on an image file in WORKDIR, mounted in a private mount
# namespace) and for MemFs (tarn-fuse's no-work file system: the transport's
# own ceiling), runs fio --rw=randwrite --bs=4k --fsync=1 with 1 and with 8
# jobs, interleaved, REPS times, and prints per run: IOPS, the machine's busy
# CPU (all cores, from /proc/stat: user+nice+system+irq+softirq; iowait and
# idle are not busy), the CPU microseconds per write+fsync, and the tarn
# daemon's own share. A run whose busy CPU is near the number of cores is
# CPU-bound: more batching in the intent log cannot make it faster there.
# TARN=path uses that binary (default: a release build of this checkout).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root (mounts, private namespace)"; exit 1; }
WORK=${1:?usage: bench/fsync-cpu.sh WORKDIR [REPS] [RUNTIME_S]}
REPS=${2:-3}
RT=${3:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
if [ -z "${IN_NS:-}" ]; then
  mkdir -p "$WORK"
  IN_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
. "$HERE/lib.sh"
TARN=$(tarn_bin)
MEMFS="$REPO/target/release/examples/memfs_mount"
[ -x "$MEMFS" ] || (cd "$REPO" && cargo build --release -q -p tarn-fuse --example memfs_mount)
export TARN_CACHE="$WORK/tarn.cache" TARN_SOCKET="$WORK/tarn.sock"
NCPU=$(nproc)

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }   # busy total (jiffies)
pcpu() { [ -n "$1" ] && awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

run() { # system dir jobs pid
  local sys=$1 dir=$2 jobs=$3 pid=$4 b0 b1 p0 p1
  rm -rf "$dir/f"; mkdir -p "$dir/f"
  read -r b0 t0 < <(busy); p0=$(pcpu "$pid")
  fio --name=f --directory="$dir/f" --numjobs="$jobs" --rw=randwrite --bs=4k --size=32M --ioengine=psync --fsync=1 \
    --time_based --runtime="$RT" --group_reporting --output-format=json --output="$WORK/fio.json" >/dev/null 2>&1
  read -r b1 t1 < <(busy); p1=$(pcpu "$pid")
  python3 - "$sys" "$jobs" "$WORK/fio.json" "$((b1 - b0))" "$((t1 - t0))" "$((p1 - p0))" "$NCPU" <<'PY'
import json, sys, os
sysname, jobs, path, busy, total, proc, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:])
j = json.load(open(path))['jobs'][0]
hz = os.sysconf('SC_CLK_TCK')
ops = j['write']['total_ios']  # all jobs' (group_reporting); job_runtime would be their sum
print(f"{sysname}\t{jobs}\t{j['write']['iops']:.0f}\t{100.0*busy/total*ncpu:.0f}%\t{1e6*busy/hz/ops:.0f}\t{1e6*proc/hz/ops:.0f}")
PY
}

echo -e "system\tjobs\tIOPS\tbusy CPU (of ${NCPU}00%)\tCPU µs per op\tof it the file system's process"
"$TARN" daemon stop >/dev/null 2>&1 || true
mkdir -p "$WORK/img" "$WORK/mnt" "$WORK/memfs"
rm -f "$WORK/img/pool.img" "$TARN_CACHE"
"$TARN" pool create -m "$WORK/mnt" fsynccpu "$WORK/img/pool.img" --size 2G >/dev/null
TPID=$(cat "$WORK/tarn.pid" 2>/dev/null || true)
# MemFs unmounts when its stdin ends: a FIFO held open on fd 3 until the end.
rm -f "$WORK/memfs.in"; mkfifo "$WORK/memfs.in"
"$MEMFS" "$WORK/memfs" 4 1 <"$WORK/memfs.in" >/dev/null 2>&1 &
MPID=$!
exec 3>"$WORK/memfs.in"
wait_mounted() { for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done; echo "$1 not mounted"; exit 1; }
wait_mounted "$WORK/memfs"
for _ in $(seq "$REPS"); do
  for jobs in 1 8; do
    run tarn "$WORK/mnt" "$jobs" "$TPID"
    run memfs "$WORK/memfs" "$jobs" "$MPID"
  done
done
"$TARN" pool destroy fsynccpu >/dev/null
"$TARN" daemon stop >/dev/null
exec 3>&-
wait "$MPID"
