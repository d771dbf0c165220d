#!/usr/bin/env bash
# tarn against zfs-fuse and ext4: the same workloads on each mounted file system,
# every image file on the same disk, in one run; a table of medians and ratios.
#
#   bench/fs-compare.sh [--size 4G] [--files 100000] [--threads 4] [--reps 3]
#                       [--runtime 20] [--systems tarn,zfs-fuse,ext4]
#                       [--compression off|on] [--workdir /var/tmp/tarn-fscompare]
#                       [--workloads seq,small,fsync,fsync8,sqlite,pgbench,dbench,overdrive,files1,filesN]
#                       [--use-mount SYSTEM=DIR]... [--json]
#
# Systems (set up and torn down here; each mounted at WORKDIR/SYSTEM/mnt):
#   tarn      `tarn pool create -m MNT POOL WORKDIR/tarn/pool.img --size N` plus
#             TARN_CREATE_OPTS (default: the compression below and
#             recordsize=128K, zfs-fuse's largest), with its own daemon
#             (TARN_SOCKET and TARN_CACHE under WORKDIR), stopped at the end
#             (`tarn pool destroy`, `tarn daemon stop`). TARN=/path/to/tarn
#             skips the build.
#   zfs-fuse  Debian's zfs-fuse 0.7.0 (pool version 23): this script starts its
#             daemon with /etc/zfs/zfsrc (ARC 100 MiB, prefetch off, FUSE attr
#             and entry timeouts 3600 s) and `zpool create` on a file image.
#             Defaults otherwise: recordsize 128K, checksum on, atime on.
#   ext4      mkfs.ext4 (defaults, lazy init off) on a loop device over an image.
# A system that cannot be set up is reported "n/a" with the reason; the others run.
# --use-mount SYSTEM=DIR runs SYSTEM's workloads on a file system someone else
# mounted at DIR (e.g. tarn's mount made by hand, if its create options differ):
# no set-up or tear-down, and its cold step is only `sync; drop_caches` (the
# daemon's own cache stays warm: the report says so). Files go in DIR/fs-compare.
#
# Compression: zfs-fuse has no lz4 (lzjb, gzip, zle only), so the default is
# compression=off on both copy-on-write systems. --compression on gives tarn
# lz4 (its default) and zfs-fuse lzjb, the nearest it has. fio and tarn-fsbench
# write incompressible data either way.
#
# Cold reads: every "cold" step unmounts the system and drops the host page
# cache (`echo 3 > /proc/sys/vm/drop_caches`), which also holds the image files
# the FUSE daemons read: ext4 is unmounted and mounted again; zfs-fuse's pool is
# exported, its daemon stopped and restarted (its ARC is empty) and the pool
# imported; tarn's pool is exported, its daemon stopped (`tarn daemon stop`) and the
# pool imported again, which starts a new daemon (TARN_IMPORT_CMD overrides the
# import: it is run with MNT, POOL, IMGDIR set).
#
# Workloads (each run REPS times, systems interleaved run by run; medians;
# --workloads runs a subset, the other rows are n/a):
#   seqwrite  fio 1 MiB writes of a new SIZE file, buffered, psync, end_fsync=1
#   seqread   fio 1 MiB reads of that file after a cold step (buffered: the
#             kernel's read-ahead and the FS's own are part of the figure)
#   randread  fio 4 KiB random reads of that file after a cold step, 4 jobs,
#             RUNTIME s; direct=1 where the FS accepts O_DIRECT (probed; all
#             three do on this kernel), else buffered from cold (column says)
#   smallwrite fio 4 KiB writes of a new 512 MiB file, buffered, psync,
#             end_fsync=1 (a write(2) per 4 KiB, as logs and tar do)
#   fsync     fio 4 KiB random writes to a 256 MiB file, fsync after each, RUNTIME s
#   fsync8    the same with 8 jobs, each on a 32 MiB file of its own (concurrent
#             fsyncs: what the intent log's shared commits are for)
#             (both: IOPS, and p50/p99 of fio's sync latency, the fsync alone)
#   sqlite    sqlite3 (Debian's CLI): one-row inserts of a 100-byte blob, each
#             its own transaction, synchronous=FULL; SQLITE_N (2000) in
#             rollback-journal mode (journal_mode=DELETE), then 3 x SQLITE_N in
#             WAL mode: inserts/s (a new database each)
#   pgbench   PostgreSQL 15 (Debian's): initdb on the mount (as the postgres
#             user), a server on a socket in WORKDIR (shared_buffers 128MB,
#             defaults otherwise: fsync on, synchronous_commit on),
#             pgbench -i -s 10, then pgbench -c 4 -j 2 -T RUNTIME: tps
#   dbench    dbench 4 clients for RUNTIME s (its default client.txt load;
#             it fsyncs as the NetBench trace says): MB/s and max latency
#   overdrive fio 16 jobs writing 1 MiB blocks, SIZE/8 each (2 x SIZE in all,
#             past the kernel's dirty limit), buffered, end_fsync=1: MiB/s and
#             p50/p99/p99.9 write completion latency
#   files-1t / files-Nt  tarn-fsbench: create FILES files of 1 KiB (sync, cold
#             step), then stat, read and delete them; 1 thread and THREADS
#   space     statfs used bytes before and after writing FILES 1 KiB files
#             (cold step before each reading, which commits every txg), / FILES
#
# Progress goes to stderr; the report (markdown, or JSON with --json) to stdout;
# WORKDIR/results.json always gets the JSON (every run, not only the medians).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

SIZE=4G FILES=100000 THREADS=4 REPS=3 RUNTIME=20 COMPRESSION=off JSON=0
ALL_WORKLOADS="seq small fsync fsync8 sqlite pgbench dbench overdrive files1 filesN" WORKLOADS="seq small fsync fsync8 overdrive files1 filesN"
SYSTEMS="tarn,zfs-fuse,ext4" WORK=/var/tmp/tarn-fscompare
declare -A USE_MOUNT
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE="$2"; shift ;;
    --files) FILES="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --reps) REPS="$2"; shift ;;
    --runtime) RUNTIME="$2"; shift ;;
    --systems) SYSTEMS="$2"; shift ;;
    --compression) COMPRESSION="$2"; shift ;;
    --workdir) WORK="$2"; shift ;;
    --workloads) WORKLOADS="${2//,/ }"; shift ;;
    --json) JSON=1 ;;
    --use-mount) [[ "$2" == ?*=/* ]] || { echo "--use-mount SYSTEM=/DIR" >&2; exit 2; }
                 USE_MOUNT[${2%%=*}]="${2#*=}"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for w in $WORKLOADS; do
  [[ " $ALL_WORKLOADS " == *" $w "* ]] || { echo "unknown workload $w: one of ${ALL_WORKLOADS// /, }" >&2; exit 2; }
done
[ -n "${WORKLOADS// /}" ] || { echo "--workloads names no workload" >&2; exit 2; }
case "$COMPRESSION" in
  off) TARN_COMP=off ZFS_COMP=off ;;
  on) TARN_COMP=lz4 ZFS_COMP=lzjb ;;
  *) echo "--compression is off or on" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mounts, drop_caches)" >&2; exit 2; }

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
export DEBIAN_FRONTEND=noninteractive
need_pkg() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2"
  { apt-get update -qq && apt-get install -y -qq "$2"; } >/dev/null 2>&1
  command -v "$1" >/dev/null 2>&1
}
need_pkg fio fio || { echo "fio is required and could not be installed" >&2; exit 1; }
need_pkg python3 python3 || { echo "python3 is required (to parse fio's JSON)" >&2; exit 1; }
for w in $WORKLOADS; do
  case $w in
    sqlite) need_pkg sqlite3 sqlite3 || { echo "the sqlite workload needs sqlite3" >&2; exit 1; } ;;
    pgbench) [ -x /usr/lib/postgresql/15/bin/postgres ] || need_pkg pgbench postgresql ||
               { echo "the pgbench workload needs postgresql" >&2; exit 1; }
             [ -x /usr/lib/postgresql/15/bin/postgres ] || { echo "the pgbench workload needs PostgreSQL 15" >&2; exit 1; } ;;
    dbench) need_pkg dbench dbench || { echo "the dbench workload needs dbench" >&2; exit 1; } ;;
  esac
done
SQLITE_N=${SQLITE_N:-2000}

bytes() { python3 -c "import sys;u={'K':1<<10,'M':1<<20,'G':1<<30,'T':1<<40};s=sys.argv[1].upper();print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$1"; }
SIZE_B=$(bytes "$SIZE")
IMG_B=$(( SIZE_B * 3 + (4 << 30) ))   # seq file + overdrive's 2 x SIZE + slack
OD_MB=$(( SIZE_B / 8 >> 20 ))

log "building tarn-fsbench"
cargo build --release -q -p tarn-fsbench || { echo "cannot build tarn-fsbench" >&2; exit 1; }
FSBENCH="$REPO/target/release/tarn-fsbench"

mkdir -p "$WORK"
RES="$WORK/results.tsv"; : > "$RES"
declare -A MNT NA SETTINGS DIRECT
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$RES"; }   # system metric value
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
wait_mounted() { # dir seconds
  local i
  for i in $(seq $(( $2 * 10 ))); do mountpoint -q "$1" && return 0; sleep 0.1; done
  return 1
}
wait_unmounted() {
  local i
  for i in $(seq $(( $2 * 10 ))); do mountpoint -q "$1" || return 0; sleep 0.1; done
  return 1
}

# ---- ext4 over a loop device ----
EXT4_LOOP=""
ext4_setup() {
  local d="$WORK/ext4"; mkdir -p "$d/mnt"
  need_pkg mkfs.ext4 e2fsprogs || { echo "e2fsprogs not installable"; return 1; }
  rm -f "$d/ext4.img"; truncate -s "$IMG_B" "$d/ext4.img" || return 1
  mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "$d/ext4.img" || return 1
  EXT4_LOOP=$(losetup -f --show "$d/ext4.img") || { echo "losetup failed"; return 1; }
  mount "$EXT4_LOOP" "$d/mnt" || { echo "mount $EXT4_LOOP failed"; return 1; }
  MNT[ext4]="$d/mnt"
  SETTINGS[ext4]="mkfs.ext4 $(mkfs.ext4 -V 2>&1 | head -1 | awk '{print $2}') defaults (4 KiB blocks, journal=ordered), lazy init off, loop device $EXT4_LOOP, mount defaults (relatime)"
}
ext4_cold() {
  umount "${MNT[ext4]}" || return 1
  drop_caches
  mount "$EXT4_LOOP" "${MNT[ext4]}"
}
ext4_teardown() {
  mountpoint -q "$WORK/ext4/mnt" && umount "$WORK/ext4/mnt"
  [ -n "$EXT4_LOOP" ] && losetup -d "$EXT4_LOOP"
  rm -f "$WORK/ext4/ext4.img"
}

# ---- zfs-fuse ----
ZPOOL=fscompare
zfs_start() {
  zfs-fuse -p "$WORK/zfs-fuse/zfs-fuse.pid" || return 1
  local i; for i in $(seq 50); do zpool list >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
zfs_stop() {
  local pid; pid=$(cat "$WORK/zfs-fuse/zfs-fuse.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null
  local i; for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && return 1
  rm -f "$WORK/zfs-fuse/zfs-fuse.pid"   # a killed daemon leaves it, and a stale one stops the next start
}
zfs-fuse_setup() {
  local d="$WORK/zfs-fuse"; mkdir -p "$d/img" "$d/mnt"
  need_pkg zfs-fuse zfs-fuse || { echo "zfs-fuse not installable"; return 1; }
  if pgrep -x zfs-fuse >/dev/null; then
    echo "another zfs-fuse daemon is running (pid $(pgrep -x zfs-fuse | tr '\n' ' ')); not touching it"; return 1
  fi
  rm -f "$d/zfs-fuse.pid"
  zfs_start || { echo "zfs-fuse daemon did not start"; return 1; }
  # A run killed before its tear-down leaves the pool in zfs-fuse's cache (FAULTED
  # once its image is gone), and then zpool create refuses the name.
  zpool list -H -o name 2>/dev/null | grep -qx "$ZPOOL" && zpool export -f "$ZPOOL" >/dev/null 2>&1
  rm -f "$d/img/pool.img"; truncate -s "$IMG_B" "$d/img/pool.img"
  zpool create -f -m "$d/mnt" -O compression="$ZFS_COMP" "$ZPOOL" "$d/img/pool.img" >/dev/null 2>&1 ||
    { echo "zpool create failed"; return 1; }
  wait_mounted "$d/mnt" 10 || { echo "pool created but not mounted"; return 1; }
  MNT[zfs-fuse]="$d/mnt"
  local props; props=$(zfs get -H -o property,value compression,recordsize,checksum,atime "$ZPOOL" | tr '\t\n' '= ' )
  SETTINGS[zfs-fuse]="zfs-fuse $(dpkg-query -W -f '${Version}' zfs-fuse 2>/dev/null), pool version $(zpool get -H -o value version "$ZPOOL" 2>/dev/null || zpool get version "$ZPOOL" | awk 'NR==2{print $3}'), ashift 12, ${props}zfsrc: $(grep -v '^#' /etc/zfs/zfsrc 2>/dev/null | grep . | tr -s ' ' | paste -sd ';')"
}
zfs-fuse_cold() {
  local d="$WORK/zfs-fuse"
  zpool export "$ZPOOL" || { sleep 2; zpool export "$ZPOOL"; } || return 1
  zfs_stop || return 1
  drop_caches
  zfs_start || return 1
  zpool import -d "$d/img" "$ZPOOL" || return 1
  wait_mounted "$d/mnt" 10
}
zfs-fuse_teardown() {
  zpool destroy "$ZPOOL" 2>/dev/null || { sleep 2; zpool destroy -f "$ZPOOL" 2>/dev/null; }
  zfs_stop
  rm -f "$WORK/zfs-fuse/img/pool.img"
}

# ---- tarn ----
TPOOL=fscompare
# Our own daemon and pool cache: another tarn daemon on this machine (the default
# socket /run/tarn/tarn.sock) is not touched.
export TARN_CACHE="$WORK/tarn/tarn.cache" TARN_SOCKET="$WORK/tarn/tarn.sock"
tarn_setup() {
  local d="$WORK/tarn"; mkdir -p "$d/img" "$d/mnt"
  if [ -z "${TARN:-}" ]; then
    cargo build --release -q -p tarn-cli 2>"$d/build.log" || { echo "tarn does not build (see $d/build.log)"; return 1; }
    TARN="$REPO/target/release/tarn"
  fi
  "$TARN" pool destroy "$TPOOL" >/dev/null 2>&1
  rm -f "$d/img/pool.img" "$TARN_CACHE"
  local opts="${TARN_CREATE_OPTS:--O compression=$TARN_COMP -O recordsize=128K}"
  # shellcheck disable=SC2086
  if ! "$TARN" pool create -m "$d/mnt" $opts "$TPOOL" "$d/img/pool.img" --size "$IMG_B" >"$d/create.log" 2>&1; then
    echo "tarn pool create -m failed: $(grep -m1 -i error "$d/create.log" || tail -1 "$d/create.log")"; return 1
  fi
  wait_mounted "$d/mnt" 20 || {
    echo "tarn pool create succeeded but $d/mnt is not mounted: $(grep -m1 -i 'warning\|error' "$d/create.log" || echo 'no message')"
    return 1; }
  MNT[tarn]="$d/mnt"
  SETTINGS[tarn]="tarn $(git -C "$REPO" rev-parse --short HEAD), create options: $opts"
}
tarn_cold() {
  local d="$WORK/tarn"
  "$TARN" pool export "$TPOOL" || return 1
  wait_unmounted "$d/mnt" 30 || return 1
  "$TARN" daemon stop || return 1   # a new daemon (the import starts it) has an empty ARC
  drop_caches
  if [ -n "${TARN_IMPORT_CMD:-}" ]; then
    MNT="$d/mnt" POOL="$TPOOL" IMGDIR="$d/img" bash -c "$TARN_IMPORT_CMD" || return 1
  else
    "$TARN" pool import -d "$d/img" -m "$d/mnt" "$TPOOL" || return 1
  fi
  wait_mounted "$d/mnt" 20
}
tarn_teardown() {
  if [ -n "${TARN:-}" ] && [ -S "$TARN_SOCKET" ]; then
    "$TARN" pool destroy "$TPOOL" >/dev/null 2>&1
    "$TARN" daemon stop
  fi
  mountpoint -q "$WORK/tarn/mnt" && umount "$WORK/tarn/mnt"
  rm -f "$WORK/tarn/img/pool.img"
}

# ---- a file system mounted by someone else (--use-mount) ----
given_setup() { # system
  local dir="${USE_MOUNT[$1]}"
  mountpoint -q "$dir" || echo "note: $dir is not a mount point itself" >&2
  mkdir -p "$dir/fs-compare" || { echo "cannot write in $dir"; return 1; }
  MNT[$1]="$dir/fs-compare"
  SETTINGS[$1]="mounted by the caller at $dir ($(stat -f -c %T "$dir")); cold step is only drop_caches: the daemon's own cache stays warm"
}
given_cold() { drop_caches; }
given_teardown() { rm -rf "${USE_MOUNT[$1]}/fs-compare"; }
impl() { [ -n "${USE_MOUNT[$1]:-}" ] && echo given || echo "$1"; }   # whose set-up functions

# ---- workloads: each takes SYSTEM MNT and records metrics ----
FIO_OUT="$WORK/fio.json"
fio_run() { fio "$@" --output-format=json --output="$FIO_OUT" >/dev/null 2>"$WORK/fio.err"; }
fio_get() { # python expression over j = jobs[0]
  python3 -c "import json,sys; j=json.load(open('$FIO_OUT'))['jobs'][0]; p=lambda d,q: d['clat_ns']['percentile'].get(q,0)/1000; print($1)"
}
cold() { # system: make the next reads cold; on failure the system is n/a from here on
  if ! "$(impl "$1")"_cold "$1" >>"$WORK/$1.log" 2>&1; then NA[$1]="cold step (remount) failed, see $WORK/$1.log"; return 1; fi
}
w_seq() {
  local s=$1 m=$2 direct=${DIRECT[$1]}
  rm -f "$m/seq.dat"; sync
  fio_run --name=seqwrite --filename="$m/seq.dat" --rw=write --bs=1M --size="$SIZE" --ioengine=psync --end_fsync=1 &&
    record "$s" seqwrite_mibs "$(fio_get "j['write']['bw']/1024")" || record "$s" seqwrite_mibs fail
  cold "$s" || return
  fio_run --name=seqread --filename="$m/seq.dat" --rw=read --bs=1M --size="$SIZE" --ioengine=psync &&
    record "$s" seqread_mibs "$(fio_get "j['read']['bw']/1024")" || record "$s" seqread_mibs fail
  cold "$s" || return
  fio_run --name=randread --filename="$m/seq.dat" --rw=randread --bs=4k --size="$SIZE" --direct="$direct" \
      --ioengine=psync --numjobs=4 --group_reporting --time_based --runtime="$RUNTIME" \
      --percentile_list=50:99:99.9 &&
    { record "$s" randread_iops "$(fio_get "j['read']['iops']")"
      record "$s" randread_p99_us "$(fio_get "p(j['read'],'99.000000')")"; } || record "$s" randread_iops fail
  rm -f "$m/seq.dat"
}
w_small() {
  local s=$1 m=$2
  fio_run --name=smallwrite --filename="$m/small.dat" --rw=write --bs=4k --size=512M --ioengine=psync --end_fsync=1 &&
    record "$s" smallwrite_mibs "$(fio_get "j['write']['bw']/1024")" || record "$s" smallwrite_mibs fail
  rm -f "$m/small.dat"
}
w_fsync() {
  local s=$1 m=$2
  fio_run --name=fsync --filename="$m/fsync.dat" --rw=randwrite --bs=4k --size=256M --ioengine=psync --fsync=1 \
      --time_based --runtime="$RUNTIME" --percentile_list=50:99:99.9 &&
    { record "$s" fsync_iops "$(fio_get "j['write']['iops']")"
      record "$s" fsync_sync_p50_us "$(fio_get "j['sync']['lat_ns']['percentile'].get('50.000000',0)/1000")"
      record "$s" fsync_sync_p99_us "$(fio_get "j['sync']['lat_ns']['percentile'].get('99.000000',0)/1000")"
      record "$s" fsync_p99_us "$(fio_get "(j['sync']['lat_ns']['percentile'].get('99.000000',0)/1000 if 'sync' in j and 'percentile' in j['sync'].get('lat_ns',{}) else 0) + p(j['write'],'99.000000')")"; } ||
    record "$s" fsync_iops fail
  rm -f "$m/fsync.dat"
}
w_fsync8() {
  local s=$1 m=$2
  mkdir -p "$m/f8"
  fio_run --name=fsync8 --directory="$m/f8" --numjobs=8 --rw=randwrite --bs=4k --size=32M --ioengine=psync --fsync=1 \
      --group_reporting --time_based --runtime="$RUNTIME" --percentile_list=50:99:99.9 &&
    { record "$s" fsync8_iops "$(fio_get "j['write']['iops']")"
      record "$s" fsync8_sync_p50_us "$(fio_get "j['sync']['lat_ns']['percentile'].get('50.000000',0)/1000")"
      record "$s" fsync8_sync_p99_us "$(fio_get "j['sync']['lat_ns']['percentile'].get('99.000000',0)/1000")"
      record "$s" fsync8_p99_us "$(fio_get "(j['sync']['lat_ns']['percentile'].get('99.000000',0)/1000 if 'sync' in j and 'percentile' in j['sync'].get('lat_ns',{}) else 0) + p(j['write'],'99.000000')")"; } ||
    record "$s" fsync8_iops fail
  rm -rf "$m/f8"
}
sqlite_inserts() { # dir journal_mode n: inserts/s
  local db="$1/bench.db" t0 t1
  rm -f "$db" "$db-journal" "$db-wal" "$db-shm"
  sqlite3 "$db" "PRAGMA journal_mode=$2; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);" >/dev/null || return 1
  sync
  python3 -c "
import sys
print('.bail on'); print('PRAGMA journal_mode=$2;'); print('PRAGMA synchronous=FULL;')
for i in range($3): print('INSERT INTO t(v) VALUES (randomblob(100));')" > "$WORK/sqlite.sql"
  t0=$(date +%s.%N)
  sqlite3 "$db" < "$WORK/sqlite.sql" >/dev/null || return 1
  t1=$(date +%s.%N)
  [ "$(sqlite3 "$db" 'SELECT count(*) FROM t')" = "$3" ] || return 1
  rm -f "$db" "$db-journal" "$db-wal" "$db-shm"
  python3 -c "print($3 / ($t1 - $t0))"
}
w_sqlite() {
  local s=$1 m=$2 v
  mkdir -p "$m/sq"
  v=$(sqlite_inserts "$m/sq" DELETE "$SQLITE_N") && record "$s" sqlite_rollback_per_s "$v" || record "$s" sqlite_rollback_per_s fail
  v=$(sqlite_inserts "$m/sq" WAL $(( SQLITE_N * 3 ))) && record "$s" sqlite_wal_per_s "$v" || record "$s" sqlite_wal_per_s fail
  rm -rf "$m/sq"
}
PG_BIN=/usr/lib/postgresql/15/bin
pg() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
w_pgbench() {
  local s=$1 m=$2 sock="$WORK/pgsock" out tps
  mkdir -p "$sock" "$m/pg"; chown postgres "$sock" "$m/pg"
  rm -rf "$m/pg/data"
  if ! pg initdb -D "$m/pg/data" -A trust -U postgres --no-locale -E UTF8 --no-instructions >>"$WORK/$s.log" 2>&1; then
    record "$s" pgbench_tps fail; rm -rf "$m/pg"; return
  fi
  pg pg_ctl -D "$m/pg/data" -l "$sock/$s.log" -w -t 120 \
     -o "-k $sock -c listen_addresses= -c port=5432 -c shared_buffers=128MB" start >>"$WORK/$s.log" 2>&1 &&
  pg pgbench -h "$sock" -p 5432 -i -s 10 -q postgres >>"$WORK/$s.log" 2>&1 &&
  out=$(pg pgbench -h "$sock" -p 5432 -c 4 -j 2 -T "$RUNTIME" -n postgres 2>>"$WORK/$s.log") &&
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1) && [ -n "$tps" ] &&
    record "$s" pgbench_tps "$tps" || record "$s" pgbench_tps fail
  pg pg_ctl -D "$m/pg/data" -m fast -w stop >>"$WORK/$s.log" 2>&1
  rm -rf "$m/pg"
}
w_dbench() {
  local s=$1 m=$2 out
  mkdir -p "$m/db"
  if out=$(dbench -D "$m/db" -t "$RUNTIME" 4 2>>"$WORK/$s.log"); then
    record "$s" dbench_mbs "$(sed -n 's/^Throughput \([0-9.]*\) MB\/sec.*/\1/p' <<<"$out" | tail -1)"
    record "$s" dbench_max_ms "$(sed -n 's/.*max_latency=\([0-9.]*\) ms.*/\1/p' <<<"$out" | tail -1)"
  else record "$s" dbench_mbs fail; fi
  rm -rf "$m/db"
}
w_overdrive() {
  local s=$1 m=$2
  mkdir -p "$m/od"
  fio_run --name=overdrive --directory="$m/od" --numjobs=16 --rw=write --bs=1M --size="${OD_MB}M" \
      --ioengine=psync --end_fsync=1 --group_reporting --percentile_list=50:99:99.9 &&
    { record "$s" overdrive_mibs "$(fio_get "j['write']['bw']/1024")"
      record "$s" overdrive_p50_us "$(fio_get "p(j['write'],'50.000000')")"
      record "$s" overdrive_p99_us "$(fio_get "p(j['write'],'99.000000')")"
      record "$s" overdrive_p999_us "$(fio_get "p(j['write'],'99.900000')")"; } || record "$s" overdrive_mibs fail
  rm -rf "$m/od"
}
# Space figures are read once the system has settled: tarn (like OpenZFS) frees
# blocks two txgs after their delete, so a reading taken right after the
# earlier workloads' deletes still counts their space and the difference can
# come out negative. `tarn pool sync` three times runs the deferred frees out;
# the others get sync(1) (zfs-fuse 0.7 has no `zpool sync`; its cold step,
# an export and import, has already synced it).
settle() {
  case "$(impl "$1")" in
    tarn) local i; for i in 1 2 3; do "$TARN" pool sync "$TPOOL" || return 1; done ;;
    *) sync ;;
  esac
}
used_bytes() { stat -f -c '%S %b %f' "$1" | awk '{printf "%.0f\n", $1 * ($2 - $3)}'; }
fsb_get() { python3 -c "import json,sys; print(json.load(sys.stdin)['phases']['$1']['ops_per_s'])"; }
w_files() { # system mnt threads
  local s=$1 m=$2 t=$3 out before after
  rm -rf "$m/files"; mkdir -p "$m/files"
  cold "$s" || return
  settle "$s"; before=$(used_bytes "$m")
  if out=$("$FSBENCH" --dir "$m/files" --files "$FILES" --threads "$t" --phases create --json); then
    record "$s" "files${t}t_create_per_s" "$(fsb_get create <<<"$out")"
  else record "$s" "files${t}t_create_per_s" fail; return; fi
  sync
  cold "$s" || return
  settle "$s"; after=$(used_bytes "$m")
  [ "$t" = 1 ] && record "$s" space_bytes_per_file "$(( (after - before) / FILES ))"
  if out=$("$FSBENCH" --dir "$m/files" --files "$FILES" --threads "$t" --phases stat,read,delete --json); then
    local ph; for ph in stat read delete; do record "$s" "files${t}t_${ph}_per_s" "$(fsb_get $ph <<<"$out")"; done
  else record "$s" "files${t}t_read_per_s" fail; fi
  rm -rf "$m/files"
}
w_files1() { w_files "$1" "$2" 1; }
w_filesN() { w_files "$1" "$2" "$THREADS"; }

# ---- run ----
IFS=, read -ra SYS <<<"$SYSTEMS"
cleanup() { local s; for s in "${SYS[@]}"; do "$(impl "$s")"_teardown "$s" >>"$WORK/$s.log" 2>&1; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for s in "${SYS[@]}"; do
  case "$s" in tarn|zfs-fuse|ext4) ;; *) echo "unknown system $s" >&2; exit 2 ;; esac
  log "setting up $s"
  : > "$WORK/$s.log"
  "$(impl "$s")"_setup "$s" >"$WORK/$s.reason" 2>>"$WORK/$s.log"   # not $(...): set-up sets globals
  reason=$(tail -1 "$WORK/$s.reason")
  if [ -z "${MNT[$s]:-}" ]; then
    NA[$s]="${reason:-set-up failed, see $WORK/$s.log}"; log "$s: n/a: ${NA[$s]}"; continue
  fi
  if dd if=/dev/zero of="${MNT[$s]}/.direct-probe" bs=4k count=1 oflag=direct status=none 2>/dev/null; then
    DIRECT[$s]=1; else DIRECT[$s]=0; fi
  rm -f "${MNT[$s]}/.direct-probe"
  log "$s mounted at ${MNT[$s]} (O_DIRECT: ${DIRECT[$s]}); ${SETTINGS[$s]}"
done

START=$(date +%s)
for w in $WORKLOADS; do
  for rep in $(seq "$REPS"); do
    for s in "${SYS[@]}"; do
      [ -n "${NA[$s]:-}" ] && continue
      log "$w rep $rep/$REPS on $s"
      t0=$(date +%s.%N)
      w_"$w" "$s" "${MNT[$s]}"
      record "$s" "secs_$w" "$(python3 -c "print($(date +%s.%N) - $t0)")"
    done
  done
done
ELAPSED=$(( $(date +%s) - START ))

# ---- report ----
for s in "${SYS[@]}"; do
  printf '%s\t%s\t%s\t%s\t%s\n' "$s" "${NA[$s]:-}" "${SETTINGS[$s]:-}" "${DIRECT[$s]:-}" "${MNT[$s]:-}"
done > "$WORK/systems.tsv"
python3 - "$RES" "$WORK/systems.tsv" "$WORK/results.json" "$JSON" <<EOF
import json, statistics, sys
res, systems_tsv, out_json, as_json = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
order = ["tarn", "zfs-fuse", "ext4"]
systems = {}
for line in open(systems_tsv):
    s, na, settings, direct, mnt = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
    systems[s] = {"available": not na, "reason": na or None, "settings": settings or None,
                  "o_direct": direct == "1", "mount": mnt or None}
runs = {}
for line in open(res):
    s, m, v = line.rstrip("\n").split("\t")
    runs.setdefault(m, {}).setdefault(s, []).append(v)
METRICS = [  # key, label, unit, higher is better
    ("seqwrite_mibs", "sequential write, 1 MiB, $SIZE", "MiB/s", True),
    ("seqread_mibs", "sequential read (cold), 1 MiB, $SIZE", "MiB/s", True),
    ("randread_iops", "random read 4 KiB (cold), 4 jobs", "IOPS", True),
    ("randread_p99_us", "random read 4 KiB, p99 latency", "us", False),
    ("smallwrite_mibs", "sequential write, 4 KiB write(2)s, 512M", "MiB/s", True),
    ("fsync_iops", "4 KiB write + fsync each", "IOPS", True),
    ("fsync_p99_us", "4 KiB write + fsync, p99 (write + sync)", "us", False),
    ("fsync8_iops", "4 KiB write + fsync each, 8 jobs", "IOPS", True),
    ("fsync8_p99_us", "4 KiB write + fsync, 8 jobs, p99 (write + sync)", "us", False),
    ("fsync_sync_p50_us", "fsync alone, 1 job, p50", "us", False),
    ("fsync_sync_p99_us", "fsync alone, 1 job, p99", "us", False),
    ("fsync8_sync_p50_us", "fsync alone, 8 jobs, p50", "us", False),
    ("fsync8_sync_p99_us", "fsync alone, 8 jobs, p99", "us", False),
    ("sqlite_rollback_per_s", "SQLite inserts, rollback journal, synchronous=FULL", "inserts/s", True),
    ("sqlite_wal_per_s", "SQLite inserts, WAL, synchronous=FULL", "inserts/s", True),
    ("pgbench_tps", "pgbench TPC-B, scale 10, 4 clients", "tps", True),
    ("dbench_mbs", "dbench, 4 clients", "MB/s", True),
    ("dbench_max_ms", "dbench, 4 clients, max latency", "ms", False),
    ("overdrive_mibs", "16 writers x 1 MiB (overdrive)", "MiB/s", True),
    ("overdrive_p50_us", "16 writers, p50 write latency", "us", False),
    ("overdrive_p99_us", "16 writers, p99 write latency", "us", False),
    ("overdrive_p999_us", "16 writers, p99.9 write latency", "us", False),
    ("files1t_create_per_s", "create $FILES x 1 KiB, 1 thread", "files/s", True),
    ("files1t_stat_per_s", "stat (cold), 1 thread", "files/s", True),
    ("files1t_read_per_s", "read (cold), 1 thread", "files/s", True),
    ("files1t_delete_per_s", "delete, 1 thread", "files/s", True),
    ("files${THREADS}t_create_per_s", "create $FILES x 1 KiB, $THREADS threads", "files/s", True),
    ("files${THREADS}t_stat_per_s", "stat (cold), $THREADS threads", "files/s", True),
    ("files${THREADS}t_read_per_s", "read (cold), $THREADS threads", "files/s", True),
    ("files${THREADS}t_delete_per_s", "delete, $THREADS threads", "files/s", True),
    ("space_bytes_per_file", "space used per 1 KiB file (statfs)", "bytes", False),
]
def median(vals):
    nums = [float(v) for v in vals if v != "fail"]
    return statistics.median(nums) if nums else None
out = {"command": "bench/fs-compare.sh --size $SIZE --files $FILES --threads $THREADS --reps $REPS --runtime $RUNTIME --compression $COMPRESSION --workloads ${WORKLOADS// /,}",
       "elapsed_s": $ELAPSED, "systems": systems, "metrics": {}}
for key, label, unit, higher in METRICS:
    vals = runs.get(key, {})
    entry = {"label": label, "unit": unit, "higher_is_better": higher, "values": {}}
    for s in systems:
        if s in vals:
            entry["values"][s] = {"median": median(vals[s]), "runs": vals[s]}
    for other in ("zfs-fuse", "ext4"):
        t = entry["values"].get("tarn", {}).get("median"); o = entry["values"].get(other, {}).get("median")
        entry["tarn_over_" + other] = (t / o) if t is not None and o else None
    out["metrics"][key] = entry
out["workload_secs"] = {k[5:]: {s: median(v) for s, v in runs[k].items()} for k in runs if k.startswith("secs_")}
json.dump(out, open(out_json, "w"), indent=1)
if as_json:
    print(json.dumps(out, indent=1)); sys.exit(0)
def cell(entry, s):
    if not systems.get(s, {"available": False})["available"] and s not in entry["values"]:
        return "n/a"
    v = entry["values"].get(s)
    if v is None: return "n/a"
    if v["median"] is None: return "fail"
    f = lambda x: "%.0f" % x if x >= 10 else "%.2f" % x
    nums = [float(x) for x in v["runs"] if x != "fail"]
    spread = " (%s–%s)" % (f(min(nums)), f(max(nums))) if len(nums) > 1 else ""
    return f(v["median"]) + spread
def ratio(r): return "n/a" if r is None else "%.2f" % r
print("| workload | unit | better | tarn | zfs-fuse | ext4 | tarn / zfs-fuse | tarn / ext4 |")
print("|---|---|---|---|---|---|---|---|")
for key, label, unit, higher in METRICS:
    e = out["metrics"][key]
    if not e["values"]:
        continue   # a workload not run
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (label, unit, "higher" if higher else "lower",
          cell(e, "tarn"), cell(e, "zfs-fuse"), cell(e, "ext4"), ratio(e["tarn_over_zfs-fuse"]), ratio(e["tarn_over_ext4"])))
print()
print("Medians of $REPS interleaved runs (min–max in brackets); %d s in all. Per system:" % $ELAPSED)
for s in order:
    if s not in systems: continue
    i = systems[s]
    if i["available"]:
        print("- %s: %s; random reads with %s." % (s, i["settings"], "direct=1" if i["o_direct"] else "buffered I/O from a cold cache (O_DIRECT refused)"))
    else:
        print("- %s: n/a (%s)" % (s, i["reason"]))
EOF
