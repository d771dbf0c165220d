# Shared helpers of the redundancy benchmarks (rebuild.sh, redundancy.sh,
# scrub-raidz.sh), sourced after `cd` to the project's root.

# The tarn to run: $TARN when set (to compare builds), else a release
# build of this checkout, built now.
tarn_bin() {
  if [ -n "${TARN:-}" ]; then echo "$TARN"; return; fi
  cargo build --release -q -p tarn-cli >&2 && echo "$PWD/target/release/tarn"
}
# Bytes in a size such as 512M or 4G.
bytes_of() { python3 -c "import sys;u={'K':1<<10,'M':1<<20,'G':1<<30};s=sys.argv[1];print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$1"; }
# Drops the host's page cache, so reads are cold. Syncs only the file
# system holding $DIR (or .): a plain `sync` waits on every mount, and
# hangs behind another process's FUSE mount whose daemon is stuck.
drop() { sync -f "${DIR:-.}"; echo 3 > /proc/sys/vm/drop_caches; }
# A monotonic clock in milliseconds.
ms() { python3 -c "import time; print(int(time.monotonic()*1000))"; }
# "median (lowest–highest)" of the arguments, whole numbers.
median() { python3 -c "import sys,statistics as s; v=[float(x) for x in sys.argv[1:]]; print('%.0f (%.0f–%.0f)' % (s.median(v), min(v), max(v)))" "$@"; }
# The bare median of the arguments.
med() { python3 -c "import sys,statistics as s; print(s.median(float(x) for x in sys.argv[1:]))" "$@"; }
