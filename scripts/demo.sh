#!/usr/bin/env bash
# Sets tarn up on a fresh Debian machine and runs its main job: build, create a
# pool striped over two files and mount it (the daemon starts on first use),
# put files on it, show it, benchmark it in-process, verify it, and leave it
# mounted. Idempotent: re-running recreates the demo pool.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in fio pkg-config fusermount3; do command -v "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: fio pkg-config fuse3"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq fio pkg-config fuse3 build-essential >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo (Rust stable) is required: https://rustup.rs" >&2; exit 1; }
cargo build --release -q -p tarn-cli
T="$PWD/target/release/tarn"
DIR="${TARN_DEMO_DIR:-/tmp/tarn-demo}"
export TARN_CACHE="$DIR/tarn.cache" TARN_SOCKET="$DIR/tarn.sock"
mkdir -p "$DIR"
"$T" pool destroy demo 2>/dev/null || true
"$T" daemon stop 2>/dev/null || true
rm -f "$DIR"/a.img "$DIR"/b.img "$TARN_CACHE"
set -x
"$T" pool create -m "$DIR/mnt" demo "$DIR/a.img" "$DIR/b.img" --size 2G
cp -r crates docs "$DIR/mnt/"
tar -C "$DIR/mnt" -cf "$DIR/mnt/crates.tar" crates
ls -l "$DIR/mnt"
df -h "$DIR/mnt"
"$T" pool list
"$T" pool status demo
# The benchmarks drive the pool in-process: the daemon lets go of it first.
"$T" daemon stop
"$T" bench demo --workload seqwrite --size 1G --recordsize 1M
"$T" bench demo --workload seqread --size 1G --recordsize 1M
"$T" bench demo --workload smallobj --objects 100000
"$T" inspect demo --verify
# Any command starts the daemon again; it imports the pool and mounts it.
"$T" pool list
diff -r crates "$DIR/mnt/crates"
set +x
echo
echo "demo pool mounted at $DIR/mnt; to use it from this shell:"
echo "  export TARN_CACHE=$TARN_CACHE TARN_SOCKET=$TARN_SOCKET"
