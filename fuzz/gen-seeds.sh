#!/usr/bin/env bash
# Writes the seed corpus — valid encodings made by tarn's own encoders, from
# tarn_engine::fuzzing's seed lists — to fuzz/seeds/<target>/seed-<n>.
# The directory is git-ignored: regenerate it rather than commit it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rm -rf fuzz/seeds
TARN_FUZZ_SEED_DIR="$root/fuzz/seeds" \
    cargo test -q -p tarn-engine --test fuzz_smoke write_seed_corpus >/dev/null
find fuzz/seeds -type f | sort
