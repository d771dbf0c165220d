#!/usr/bin/env bash
# sync=always against sync=standard on a tarn mount: fio 1 MiB sequential
# writes of a new SIZE file (buffered, psync, end_fsync=1), the settings
# interleaved run by run; medians, min–max, and the ratio to sync=standard.
#
#   bench/sync-always.sh [--size 1G] [--reps 3] [--workdir /var/tmp/tarn-syncalways]
#
# Settings, each on the same pool (one image file, compression=off,
# recordsize=128K):
#   standard             sync=standard: the data is durable at end_fsync (one
#                        fsync, which commits the file's log records)
#   always               sync=always, logbias=latency: every write(2) is
#                        logged and committed before it returns (files opened
#                        under sync=always bypass the kernel's write-back
#                        cache)
#   always-throughput    sync=always, logbias=throughput: each write's whole
#                        128K blocks are written in place at commit and
#                        logged by pointer (indirect records); the txg's sync
#                        links them instead of writing them again (the
#                        issue's target: >= 50 % of standard's bandwidth)
# With logbias=latency and no log device, 1 MiB writes (>= 32K,
# zfs_immediate_write_sz) are logged indirectly too, as in OpenZFS; the
# `always-copied` setting raises zfs_immediate_write_sz past 1 MiB (a
# tunable of the running daemon) so that arm copies the data into the log,
# as every arm did before indirect writes.
# For each setting the intent log's counters (tarn zilstat --json) before and
# after the run give the commits, the bytes copied into log blocks, the
# bytes written in place (iib), and the commits that synced the txg instead
# (fb: more than tarn_zil_commit_max_bytes of records, as standard's
# end_fsync of 1 GiB).
# TARN=/path/to/tarn skips the release build. Needs root (mounts, drop_caches).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
SIZE=1G REPS=3 WORK=/var/tmp/tarn-syncalways
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE="$2"; shift ;;
    --reps) REPS="$2"; shift ;;
    --workdir) WORK="$2"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "needs root (mounts, drop_caches)" >&2; exit 2; }
command -v fio >/dev/null || { echo "needs fio (apt-get install fio)" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
if [ -z "${TARN:-}" ]; then
  cargo build --release -q -p tarn-cli || { echo "tarn does not build" >&2; exit 1; }
  TARN="$REPO/target/release/tarn"
fi
mkdir -p "$WORK/img" "$WORK/mnt"
export TARN_CACHE="$WORK/tarn.cache" TARN_SOCKET="$WORK/tarn.sock"
POOL=syncalways
cleanup() {
  "$TARN" pool destroy "$POOL" >/dev/null 2>&1
  "$TARN" daemon stop >/dev/null 2>&1
  rm -f "$WORK/img/pool.img"
}
trap cleanup EXIT
"$TARN" pool destroy "$POOL" >/dev/null 2>&1
rm -f "$WORK/img/pool.img" "$TARN_CACHE"
"$TARN" pool create -m "$WORK/mnt" -O compression=off -O recordsize=128K "$POOL" "$WORK/img/pool.img" --size 16G >/dev/null ||
  { echo "tarn pool create failed" >&2; exit 1; }
RES="$WORK/results.tsv"; : > "$RES"
zil() { "$TARN" zilstat -p "$POOL" --json; }
for rep in $(seq "$REPS"); do
  for setting in standard always always-copied always-throughput; do
    imm=32K
    case $setting in
      standard) "$TARN" set sync=standard "$POOL" && "$TARN" set logbias=latency "$POOL" ;;
      always) "$TARN" set sync=always "$POOL" && "$TARN" set logbias=latency "$POOL" ;;
      always-copied) "$TARN" set sync=always "$POOL" && "$TARN" set logbias=latency "$POOL"; imm=1G ;;
      always-throughput) "$TARN" set sync=always "$POOL" && "$TARN" set logbias=throughput "$POOL" ;;
    esac || { echo "tarn set failed" >&2; exit 1; }
    "$TARN" tunable set zfs_immediate_write_sz="$imm" >/dev/null || { echo "tarn tunable set failed" >&2; exit 1; }
    rm -f "$WORK/mnt/seq.dat"; "$TARN" pool sync "$POOL"; sync; echo 3 > /proc/sys/vm/drop_caches
    before=$(zil)
    log "$setting rep $rep/$REPS"
    fio --name=seq --filename="$WORK/mnt/seq.dat" --rw=write --bs=1M --size="$SIZE" --ioengine=psync --end_fsync=1 \
        --output-format=json --output="$WORK/fio.json" >/dev/null 2>"$WORK/fio.err" || { echo "fio failed: $(cat "$WORK/fio.err")" >&2; exit 1; }
    after=$(zil)
    python3 - "$setting" "$WORK/fio.json" "$before" "$after" >> "$RES" <<'EOF'
import json, sys
s, f, b, a = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
j = json.load(open(f))["jobs"][0]
d = lambda k: (a.get(k) or 0) - (b.get(k) or 0)
print("%s\t%.1f\t%d\t%d\t%d\t%d\t%d" % (s, j["write"]["bw"] / 1024, d("cc"), d("icb"), d("iib"), d("imnc"), d("fb")))
EOF
  done
done
rm -f "$WORK/mnt/seq.dat"
python3 - "$RES" "$SIZE" "$REPS" "tarn $(git -C "$REPO" rev-parse --short HEAD)" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
size, reps, ver = sys.argv[2], sys.argv[3], sys.argv[4]
by = {}
for s, bw, cc, icb, iib, imnc, fb in rows:
    by.setdefault(s, []).append((float(bw), int(cc), int(icb), int(iib), int(imnc), int(fb)))
base = statistics.median(r[0] for r in by["standard"])
print("fio 1 MiB sequential writes of a new %s file, buffered, end_fsync=1; %s interleaved runs; %s" % (size, reps, ver))
print()
print("| setting | MiB/s median (min–max) | / standard | log commits per run | bytes copied into the log per run | bytes written in place per run | log blocks per run | commits that synced the txg instead |")
print("|---|---|---|---|---|---|---|---|")
for s in ["standard", "always", "always-copied", "always-throughput"]:
    r = by[s]; bws = [x[0] for x in r]; m = statistics.median(bws)
    print("| %s | %.0f (%.0f–%.0f) | %.2f | %d | %d | %d | %d | %d |" % (s, m, min(bws), max(bws), m / base,
          *(statistics.median(x[k] for x in r) for k in (1, 2, 3, 4, 5))))
EOF
