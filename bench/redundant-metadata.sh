#!/usr/bin/env bash
# The cost of redundant_metadata (issue 11 item 4): small-object and small-file
# creation under each value, the runs of all values interleaved round by round
# so that a busy spell on the machine hits them alike; medians and ranges.
#
#   bench/redundant-metadata.sh [--values all,most,some,none] [--rounds 3]
#                               [--objects 100000] [--files 100000] [--threads 4]
#                               [--workdir /var/tmp/tarn-redundant] [--skip-smallobj] [--skip-files]
#
# 1. smallobj: `tarn bench POOL --workload smallobj --objects N
#    --redundant-metadata V` on one 4 GiB pool (the override applies to the
#    run's writes only; the bench frees its objects afterwards): objects/s,
#    objects per physical write, bytes allocated per 1 KiB object, bytes
#    written to the device per object, CPU time per object (less disturbed
#    by other work on the machine than the wall-clock rate).
# 2. files: `bench/fs-compare.sh --systems tarn --workloads files1,filesN
#    --reps 1 --size 1G` with TARN_CREATE_OPTS adding `-O redundant_metadata=V`
#    (a fresh pool per run): creates/stat/read/delete per second with 1 and
#    THREADS threads, and statfs bytes per 1 KiB file. Needs root, /dev/fuse.
# The load average is printed with each run: other work on the machine slows
# every value alike only on average.
set -uo pipefail
cd "$(dirname "$0")/.."
VALUES=all,most,some,none ROUNDS=3 OBJECTS=100000 FILES=100000 THREADS=4
WORK=/var/tmp/tarn-redundant SMALLOBJ=1 FILESW=1
while [ $# -gt 0 ]; do
  case "$1" in
    --values) VALUES="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --objects) OBJECTS="$2"; shift ;;
    --files) FILES="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --workdir) WORK="$2"; shift ;;
    --skip-smallobj) SMALLOBJ=0 ;;
    --skip-files) FILESW=0 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
IFS=, read -ra VALS <<<"$VALUES"
for v in "${VALS[@]}"; do
  case "$v" in all|most|some|none) ;; *) echo "bad value $v: all, most, some or none" >&2; exit 2 ;; esac
done
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
load() { cut -d' ' -f1 /proc/loadavg; }
mkdir -p "$WORK"
RES="$WORK/results.tsv"; : > "$RES"   # value metric number load
if [ -z "${TARN:-}" ]; then
  cargo build --release -q -p tarn-cli || { echo "tarn does not build" >&2; exit 1; }
  TARN="$PWD/target/release/tarn"
fi
export TARN

if [ "$SMALLOBJ" = 1 ]; then
  export TARN_CACHE="$WORK/smallobj/tarn.cache" TARN_SOCKET="$WORK/smallobj/tarn.sock"
  mkdir -p "$WORK/smallobj"; rm -f "$WORK/smallobj/pool.img" "$TARN_CACHE"
  "$TARN" pool create -m none rmbench "$WORK/smallobj/pool.img" --size 4G >/dev/null || exit 1
  "$TARN" daemon stop >/dev/null 2>&1
  for r in $(seq "$ROUNDS"); do
    for v in "${VALS[@]}"; do
      l=$(load); log "smallobj round $r/$ROUNDS, redundant_metadata=$v (load $l)"
      # CPU time (user + system) of the whole bench process: unlike the
      # wall clock, hardly changed by other processes on the machine.
      TIMEFORMAT='%3U %3S'
      { time "$TARN" bench rmbench --workload smallobj --objects "$OBJECTS" --redundant-metadata "$v" --json \
          >"$WORK/smallobj/out.json" 2>"$WORK/smallobj/err.log"; } 2>"$WORK/smallobj/cpu.txt" || continue
      python3 - "$WORK/smallobj/out.json" "$v" "$l" "$WORK/smallobj/cpu.txt" >>"$RES" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); v, l = sys.argv[2], sys.argv[3]
cpu = sum(float(x) for x in open(sys.argv[4]).read().split())
print("%s\tsmallobj_cpu_us_per_object\t%s\t%s" % (v, cpu * 1e6 / max(j["ops"], 1), l))
for k in ("ops_per_s", "ops_per_device_write", "bytes_allocated_per_object"):
    print("%s\tsmallobj_%s\t%s\t%s" % (v, k, j[k], l))
print("%s\tsmallobj_device_bytes_per_object\t%s\t%s" % (v, j["device_write_bytes"] / max(j["ops"], 1), l))
EOF
    done
  done
  "$TARN" pool destroy rmbench >/dev/null 2>&1; "$TARN" daemon stop >/dev/null 2>&1
  rm -f "$WORK/smallobj/pool.img"   # up to its 4 GiB on the disk once written
  unset TARN_CACHE TARN_SOCKET
fi

if [ "$FILESW" = 1 ]; then
  mkdir -p "$WORK/fs"
  for r in $(seq "$ROUNDS"); do
    for v in "${VALS[@]}"; do
      l=$(load); log "files round $r/$ROUNDS, redundant_metadata=$v (load $l)"
      TARN_CREATE_OPTS="-O compression=off -O recordsize=128K -O redundant_metadata=$v" \
        bench/fs-compare.sh --systems tarn --workloads files1,filesN --reps 1 --size 1G \
          --files "$FILES" --threads "$THREADS" --workdir "$WORK/fs" --json >"$WORK/fs/out.json" 2>>"$WORK/fs-compare.log" || continue
      python3 - "$WORK/fs/out.json" "$v" "$l" >>"$RES" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); v, l = sys.argv[2], sys.argv[3]
for k, e in j["metrics"].items():
    m = e["values"].get("tarn", {}).get("median")
    if m is not None:
        print("%s\t%s\t%s\t%s" % (v, k, m, l))
EOF
    done
  done
fi

python3 - "$RES" "$VALUES" "$ROUNDS" <<'EOF'
import statistics, sys
res, values, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
runs, loads = {}, []
for line in open(res):
    v, k, x, l = line.rstrip("\n").split("\t")
    runs.setdefault(k, {}).setdefault(v, []).append(float(x))
    loads.append(float(l))
LABELS = [
    ("smallobj_ops_per_s", "smallobj: 1 KiB objects created", "objects/s"),
    ("smallobj_ops_per_device_write", "smallobj: objects per physical write", "objects"),
    ("smallobj_bytes_allocated_per_object", "smallobj: bytes allocated per 1 KiB object", "bytes"),
    ("smallobj_device_bytes_per_object", "smallobj: bytes written to the device per object (all txgs of the run)", "bytes"),
    ("smallobj_cpu_us_per_object", "smallobj: CPU time (user + system) of the bench process per object", "us"),
]
# fs-compare's file rows: filesNt_PHASE_per_s and space_bytes_per_file.
for t in sorted({k.split("t_")[0][5:] for k in runs if k.startswith("files")}, key=int):
    for ph, what in (("create", "create 1 KiB files"), ("stat", "stat (cold)"), ("read", "read (cold)"), ("delete", "delete")):
        LABELS.append(("files%st_%s_per_s" % (t, ph), "files: %s, %s thread%s" % (what, t, "" if t == "1" else "s"), "files/s"))
LABELS.append(("space_bytes_per_file", "files: statfs bytes per 1 KiB file", "bytes"))
def fmt(x):
    return "%.0f" % x if abs(x) >= 10 else "%.2f" % x
print("| measure | unit | " + " | ".join("redundant_metadata=" + v for v in values) + " |")
print("|---|---|" + "---|" * len(values))
for k, label, unit in LABELS:
    if k not in runs:
        continue
    cells = []
    for v in values:
        xs = runs[k].get(v, [])
        cells.append("%s (%s–%s)" % (fmt(statistics.median(xs)), fmt(min(xs)), fmt(max(xs))) if xs else "n/a")
    print("| %s | %s | %s |" % (label, unit, " | ".join(cells)))
print()
print("Median (min–max) of %s interleaved rounds per value; load average at the start of each run %s–%s." %
      (rounds, fmt(min(loads)) if loads else "?", fmt(max(loads)) if loads else "?"))
EOF
