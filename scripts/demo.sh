#!/usr/bin/env bash
# Sets tarn up on a fresh Debian machine and runs its main job: build, create a
# pool striped over two files, show it, write and read through it, verify it.
# Idempotent: re-running recreates the demo pool.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in fio pkg-config; do command -v "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq fio pkg-config build-essential >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq fio pkg-config build-essential >/dev/null; fi
fi
command -v cargo >/dev/null || { echo "cargo (Rust stable) is required: https://rustup.rs" >&2; exit 1; }
cargo build --release -q -p tarn-cli
T="$PWD/target/release/tarn"
DIR="${TARN_DEMO_DIR:-/tmp/tarn-demo}"
export TARN_CACHE="$DIR/tarn.cache"
mkdir -p "$DIR"
"$T" pool destroy demo 2>/dev/null || true
rm -f "$DIR"/a.img "$DIR"/b.img "$TARN_CACHE"
set -x
"$T" pool create demo "$DIR/a.img" "$DIR/b.img" --size 2G
"$T" pool list
"$T" pool status demo
"$T" bench demo --workload seqwrite --size 1G --recordsize 1M
"$T" bench demo --workload seqread --size 1G --recordsize 1M
"$T" bench demo --workload smallobj --objects 100000
"$T" inspect demo --verify
"$T" pool export demo
"$T" pool import -d "$DIR"
"$T" pool import -d "$DIR" demo
"$T" pool list
