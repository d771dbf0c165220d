#!/usr/bin/env bash
# One fio fsync load on a fresh tarn pool and what zilstat saw of it: where a
# commit's time goes (fill, log block write, flush) and how commits share
# rounds and flushes. No zfs-fuse, no ext4, no sync(2) (fs-compare's set-up
# and cold steps call it, and it hangs machine-wide while any FUSE mount on
# the kernel does not answer).
#
#   bench/zil-fsync.sh TARN LABEL [RUNTIME_S] [JOBS] [WORKDIR]
#
# TUNABLES="name=value …" sets those tunables after the pool is created
# (e.g. TUNABLES=tarn_zil_rounds_in_flight=1 for one round at a time).
#
# fio: 4 KiB random writes, psync, fsync=1, JOBS jobs on 32 MiB files of
# their own, a 3 s warm-up then RUNTIME_S (15) s. Prints fio's IOPS and
# fsync latency, and zilstat's counters since import (warm-up included;
# fius/wrus/flus are averages since import). Alternate binaries run by run:
# the figures swing with the machine's load.
set -u
T=$1; L=$2; RT=${3:-15}; J=${4:-1}; W=${5:-/var/tmp/tarn-zil-fsync}
mkdir -p "$W/mnt"
export TARN_CACHE=$W/tarn.cache TARN_SOCKET=$W/tarn.sock
"$T" pool destroy zilfsync >/dev/null 2>&1; rm -f "$W/pool.img" "$TARN_CACHE" "$W/tarn.tunables"
"$T" pool create -m "$W/mnt" -O compression=off -O recordsize=128K zilfsync "$W/pool.img" --size 4G >"$W/create.log" 2>&1 || { cat "$W/create.log"; exit 1; }
for t in ${TUNABLES:-}; do "$T" tunable set "$t" >/dev/null || exit 1; done
mkdir -p "$W/mnt/f"
job() { fio --name=w --directory="$W/mnt/f" --numjobs="$J" --rw=randwrite --bs=4k --size=32M --ioengine=psync --fsync=1 \
  --time_based --group_reporting --percentile_list=50:99 --output-format=json "$@" >/dev/null 2>&1; }
job --runtime=3
job --runtime="$RT" --output="$W/fio.json"
Z=$("$T" zilstat --json)
python3 - "$L" "$Z" "$W/fio.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[3]))['jobs'][0]
s = j['sync']['lat_ns']
print(f"{sys.argv[1]}: iops {j['write']['iops']:.0f}  fsync p50 {s['percentile']['50.000000']/1000:.0f}us "
      f"p99 {s['percentile']['99.000000']/1000:.0f}us mean {s['mean']/1000:.0f}us")
print("  zilstat since import:", sys.argv[2])
PY
"$T" pool destroy zilfsync >/dev/null 2>&1; "$T" daemon stop >/dev/null 2>&1
