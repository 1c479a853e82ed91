#!/usr/bin/env bash
# Runs saltdb's fuzz targets (fuzz/fuzz_targets/*.rs) with cargo-fuzz and libFuzzer.
#
#   bench/fuzz.sh [seconds-per-target] [target...]
#
# Each target runs for the given seconds (default 60) with -max_total_time, its corpus seeded
# from tests/fuzz_regressions/<target>/. Prints one line per target: executions and crashes
# (new files in fuzz/artifacts/<target>/). Exits non-zero when any target crashed.
#
# Environment: FUZZ_TOOLCHAIN (default nightly), FUZZ_TARGET_DIR (default fuzz/target),
# FUZZ_MAX_LEN (largest generated input, default 4096 bytes; the seeds hold a few larger ones),
# FUZZ_ARGS (extra libFuzzer flags, e.g. "-jobs=2").
set -euo pipefail

secs=${1:-60}
shift || true
case $secs in '' | *[!0-9]*) echo "usage: $0 [seconds-per-target] [target...]" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
toolchain=${FUZZ_TOOLCHAIN:-nightly}
target_dir=${FUZZ_TARGET_DIR:-$root/fuzz/target}

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz not found; installing it" >&2
    cargo install cargo-fuzz
fi

cd "$root/fuzz"
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$toolchain" fuzz list)
fi

# -a: overflow checks and debug assertions on, so arithmetic overflow is a crash.
build_one=()
if [ ${#targets[@]} -eq 1 ]; then
    build_one=("${targets[0]}")
fi
cargo "+$toolchain" fuzz build -a --target-dir "$target_dir" "${build_one[@]}" >&2

mkdir -p "$root/fuzz/artifacts/logs"
count_artifacts() {
    find "$root/fuzz/artifacts/$1" -maxdepth 1 -type f \
        \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) 2>/dev/null | wc -l
}

rows=()
failed=0
for t in "${targets[@]}"; do
    corpus="$root/fuzz/corpus/$t"
    mkdir -p "$corpus" "$root/fuzz/artifacts/$t"
    if [ -d "$root/tests/fuzz_regressions/$t" ]; then
        cp -n "$root/tests/fuzz_regressions/$t"/* "$corpus"/ 2>/dev/null || true
    fi
    dict=()
    if [ -f "$root/fuzz/dicts/$t.dict" ]; then
        dict=("-dict=$root/fuzz/dicts/$t.dict")
    fi
    before=$(count_artifacts "$t")
    log="$root/fuzz/artifacts/logs/$t.log"
    echo "== $t: ${secs}s (log: $log)" >&2
    started=$(date +%s)
    # -timeout: one input running longer than 10 s is a hang; -rss_limit_mb/-malloc_limit_mb: a
    # bounded decoder never needs anywhere near 2 GiB.
    # shellcheck disable=SC2086
    if cargo "+$toolchain" fuzz run -a --target-dir "$target_dir" "$t" "$corpus" -- \
        -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-4096}" \
        "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1; then
        status=ok
    else
        status="exit $?"
    fi
    took=$(( $(date +%s) - started ))
    execs=$(grep -ho 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    crashes=$(( $(count_artifacts "$t") - before ))
    if [ "$crashes" -gt 0 ] || [ "$status" != ok ]; then
        failed=1
        grep -m1 -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" >&2 || true
    fi
    rows+=("$(printf '%-18s %14s %8s %8s  %s' "$t" "${execs:-?}" "${took}s" "$crashes" "$status")")
done

printf '%-18s %14s %8s %8s  %s\n' target executions time crashes status
printf '%s\n' "${rows[@]}"
if [ "$failed" -ne 0 ]; then
    echo "crashing inputs are in fuzz/artifacts/<target>/; replay one with: cargo +$toolchain fuzz run <target> <file>" >&2
    exit 1
fi
