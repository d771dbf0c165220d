#!/usr/bin/env bash
# The ARC in a memory cgroup whose limit is lowered and raised (issue 11).
#
# Starts a private daemon inside a new memory cgroup (limit 1G: its
# zfs_arc_max defaults to a quarter, 256M), creates pool 'tank' on an image
# under $D with its root mounted, writes a file larger than the limit
# (random bytes, from outside the cgroup), then reads random 1 MiB pieces
# of it from a reader *inside* the cgroup (its page cache is charged there,
# as in a container holding the daemon and its users) while the limit
# changes: 1G for 60 s, 600M for 60 s, 1G for 60 s (PHASES). Every second it
# prints the cgroup's limit and usage (of which anon, page cache and kernel
# memory), the daemon's RSS, and the ARC's target c, size and
# memory_throttle_count from the daemon's Prometheus endpoint.
#
# Cgroup v2 when the memory controller is there (/sys/fs/cgroup/
# cgroup.controllers; +memory is enabled in the root's subtree_control if
# needed), else v1's memory controller (a child of this shell's memory
# cgroup). Needs root and FUSE. Says what failed if it cannot set up.
#
# Usage: bench/arc-cgroup.sh
# Environment: TARN (default target/release/tarn), ARC_CG_DIR (default
# /var/tmp/tarn-arc-cgroup), PHASES ("1G:60 600M:60 1G:60"), FILE_MB
# (1536), READS_PER_S (100) of READ_KB (1024) each, TUNABLES (extra daemon tunables, e.g.
# "zfs_arc_max=700M"), PORT (19187).
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(realpath "${TARN:-target/release/tarn}")
D=${ARC_CG_DIR:-/var/tmp/tarn-arc-cgroup}
PHASES=${PHASES:-"1G:60 600M:60 1G:60"}
FILE_MB=${FILE_MB:-1536}
RATE=${READS_PER_S:-100}
READ_KB=${READ_KB:-1024}
PORT=${PORT:-19187}
export TARN_CACHE=$D/tarn.cache TARN_SOCKET=$D/tarn.sock
name=tarn-arc-cgroup-$$

# The cgroup: v2 or v1, and the names of its files.
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  V=2
  if ! grep -qw memory /sys/fs/cgroup/cgroup.subtree_control; then
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control || { echo "cannot enable +memory in /sys/fs/cgroup/cgroup.subtree_control" >&2; exit 1; }
  fi
  CG=/sys/fs/cgroup/$name
  LIMIT=memory.max USAGE=memory.current ANON=anon FILE=file
  kmem() { stat kernel; }
elif [ -d /sys/fs/cgroup/memory ]; then
  V=1
  own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
  CG=/sys/fs/cgroup/memory${own%/}/$name
  LIMIT=memory.limit_in_bytes USAGE=memory.usage_in_bytes ANON=total_rss FILE=total_cache
  kmem() { cat "$CG/memory.kmem.usage_in_bytes"; }
else
  echo "no memory cgroup: /sys/fs/cgroup/cgroup.controllers lists no memory controller and /sys/fs/cgroup/memory does not exist" >&2
  exit 1
fi
mkdir "$CG" || { echo "cannot create the cgroup $CG" >&2; exit 1; }

cleanup() {
  [ -n "${reader:-}" ] && kill "$reader" 2>/dev/null || true
  "$T" daemon stop >/dev/null 2>&1 || true
  sleep 0.5
  grep -q "oom_kill [1-9]" "$CG/memory.oom_control" 2>/dev/null && echo "(the cgroup's OOM killer ran: $(grep oom_kill "$CG/memory.oom_control"))" >&2
  grep -q "^oom_kill [1-9]" "$CG/memory.events" 2>/dev/null && echo "(the cgroup's OOM killer ran: $(grep '^oom_kill' "$CG/memory.events"))" >&2
  rmdir "$CG" 2>/dev/null || echo "(cgroup $CG left behind: $(cat "$CG/cgroup.procs" 2>/dev/null | wc -l) processes in it)" >&2
  cp "$D/tarn.log" "${TMPDIR:-/tmp}/arc-cgroup-tarn.log" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
"$T" daemon stop >/dev/null 2>&1 || true
rm -rf "$D" && mkdir -p "$D/mnt"

first=${PHASES%%:*}
echo "$first" > "$CG/$LIMIT"
tun=()
for t in ${TUNABLES:-}; do tun+=(--tunable "$t"); done
# The daemon starts (and forks) from a shell already in the cgroup.
bash -c "echo \$\$ > '$CG/cgroup.procs' && exec '$T' ${tun[*]:-} daemon --metrics 127.0.0.1:$PORT" >/dev/null
pid=$(cat "$D/tarn.pid")
grep -qx "$pid" "$CG/cgroup.procs" || { echo "the daemon ($pid) is not in $CG" >&2; exit 1; }
"$T" pool create -m "$D/mnt" tank "$D/tank.img" --size 4G >/dev/null
dd if=/dev/urandom of="$D/mnt/f" bs=1M count="$FILE_MB" status=none
"$T" pool sync tank >/dev/null

# The reader, inside the cgroup: random reads of READ_KB at RATE a second.
bash -c "echo \$\$ > '$CG/cgroup.procs' && exec python3 -c '
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); bs = int(sys.argv[3]) * 1024; n = os.fstat(fd).st_size // bs; rate = int(sys.argv[2])
t0 = time.time(); i = 0
while True:
    os.pread(fd, bs, random.randrange(n) * bs); i += 1
    ahead = i / rate - (time.time() - t0)
    if ahead > 0: time.sleep(ahead)
' '$D/mnt/f' $RATE $READ_KB" &
reader=$!

metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d", s }'; }
stat() { awk -v k="$1" '$1 == k { print $2 }' "$CG/memory.stat"; }
mib() { echo $(( $1 >> 20 )); }
echo "arc-cgroup: cgroup v$V ($CG), daemon $pid, file $FILE_MB MiB read at $RATE x $READ_KB KiB/s from inside the cgroup; tunables: ${TUNABLES:-defaults}"
printf '%4s %6s %6s %6s %6s %6s %6s %6s %6s %4s\n' t limit usage anon cache kernel rss c size thr
s=0
for phase in $PHASES; do
  lim=${phase%%:*} secs=${phase##*:} set=""
  for ((k = 0; k < secs; k++)); do
    # A limit below what the cgroup cannot reclaim is refused (v1: EBUSY):
    # tried again every second until it holds.
    if [ -z "$set" ]; then
      if echo "$lim" > "$CG/$LIMIT" 2>"$D/limit.err"; then set=1; else echo "(setting $LIMIT to $lim failed: $(tr -d '\n' < "$D/limit.err"); again in 1 s)"; fi
    fi
    rss=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status" 2>/dev/null || echo 0)
    printf '%4d %6s %6s %6s %6s %6s %6s %6s %6s %4s\n' "$s" "$(mib "$(cat "$CG/$LIMIT")")" "$(mib "$(cat "$CG/$USAGE")")" "$(mib "$(stat $ANON)")" "$(mib "$(stat $FILE)")" "$(mib "$(kmem)")" \
      "$(mib "$rss")" "$(mib "$(metric tarn_arc_target_bytes)")" "$(mib "$(metric tarn_arc_size_bytes)")" "$(metric tarn_arc_memory_throttle_total)"
    s=$((s + 1))
    sleep 1
  done
done
echo "(MiB; thr: times the ARC's target was lowered for the host, n/a as 0 on builds without the counter)"
