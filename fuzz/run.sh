#!/usr/bin/env bash
# Usage: fuzz/run.sh [SECONDS] [TARGET...]
# Runs each cargo-fuzz target (all of them by default) for SECONDS (default
# 30), starting from the seed corpus and growing fuzz/corpus/<target>.
# Crashes land in fuzz/artifacts/<target>/; each run's log in
# fuzz/artifacts/<target>.log. Needs the nightly toolchain and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
shift || true
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
[ -d fuzz/seeds ] || fuzz/gen-seeds.sh >/dev/null
mkdir -p fuzz/artifacts
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    # -malloc_limit_mb: no decoder needs more than a couple of MiB at once
    # (block_decode's largest logical block is 1 MiB); -timeout: a hang.
    if ! cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=64 -timeout=10 \
        >"fuzz/artifacts/$t.log" 2>&1; then
        echo "$t: FAILED, see fuzz/artifacts/$t.log"
        tail -n 30 "fuzz/artifacts/$t.log"
        exit 1
    fi
    echo "$t: $(grep -E '^Done [0-9]+ runs' "fuzz/artifacts/$t.log" | tail -n 1)," \
        "corpus $(find "fuzz/corpus/$t" -type f | wc -l) inputs"
done
