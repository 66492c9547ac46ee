#!/usr/bin/env bash
# The e2e benchmark's last fold alone: over the server that `KEEP=1
# benches/e2e.sh` kept, a lake of the whole binlog is written once with
# current tables off, then each run folds a copy of it (`run
# --until-caught-up` with current tables on finds nothing to stream and
# folds every change: 3.79 million at BULK_ROWS=1500000). Prints each run's
# fold figures from sluice's log and its wall, user and system time, and
# after each round the first binary's run with current tables off (the same
# start-up and catch-up without the fold: subtract it to get the fold's own).
#
#   KEEP=1 BULK_ROWS=1500000 SB_INSERT_EVENTS=20000 SB_WRITE_EVENTS=5000 RUNS=1 TOOLS=sluice benches/e2e.sh
#   benches/fold_only.sh /tmp/sluice-bench.XXXXXX [SLUICE_BIN ...]
#
# With several binaries, their runs alternate (A/B on a noisy machine).
# Knobs: RUNS=3 (runs per binary); START=file:pos (default: the start
# position of benches/results/meta.json, the last e2e run's); OWN_BASE=1:
# each binary writes its own base lake and folds that (to compare changelog
# formats), else the first binary writes the one every binary folds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=benches/lib.sh
source benches/lib.sh

KEPT="${1:?usage: benches/fold_only.sh KEPT_DIR [SLUICE_BIN ...]}"
shift
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/target/release/sluice")
RUNS="${RUNS:-3}"
kept_server "$KEPT"
ensure_mariadb

work="$(mktemp -d -t sluice-fold-only.XXXXXX)"
cleanup() {
    server_stop
    rm -rf "$work"
}
trap cleanup EXIT
server_start "$KEPT"

config() { # dir current-enabled
    bench_config "$1" bench "$PORT" "$START_FILE" "$START_POS"
    printf '\n[current]\nenabled = %s\n' "$2" >>"$1/sluice.toml"
}

# base_of BIN_INDEX: the base lake that binary folds.
base_of() {
    if [ "${OWN_BASE:-0}" = 1 ]; then echo "$work/base$1"; else echo "$work/base0"; fi
}
for i in "${!BINS[@]}"; do
    base="$(base_of "$i")"
    [ -d "$base" ] && continue
    banner "the lake of the whole binlog, current tables off, by ${BINS[$i]}"
    mkdir -p "$base"
    config "$base" false
    /usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KiB peak" -o "$work/time" \
        env SLUICE_SOURCE_PASSWORD=bench "${BINS[$i]}" run --config "$base/sluice.toml" --until-caught-up 2>"$base.err"
    echo "base lake by ${BINS[$i]}: $(find "$base/lake" -name '*.parquet' | wc -l) files," \
        "$(du -sb "$base/lake" | cut -f1) bytes, $(cat "$work/time")"
done

# One run of binary number $1 over a fresh copy of its base lake, current tables
# on ($2 = true) or off (the same start-up and catch-up with nothing folded:
# what the process costs besides the fold).
run_once() { # bin-index current-enabled label
    rm -rf "$work/run"
    mkdir -p "$work/run"
    cp -r "$(base_of "$1")/lake" "$(base_of "$1")/state" "$work/run/"
    config "$work/run" "$2"
    /usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KiB peak" -o "$work/time" \
        env SLUICE_SOURCE_PASSWORD=bench "${BINS[$1]}" run --config "$work/run/sluice.toml" --until-caught-up 2>"$work/run.err"
    figures="$({ grep "current tables folded" "$work/run.err" || true; } \
        | grep -o 'changed_rows=[0-9]*\|rows_sorted=[0-9]*\|bytes_added=[0-9]*\|read_ms=[0-9]*\|apply_ms=[0-9]*' | tr '\n' ' ' || true)"
    echo "run $run $3: $figures$(cat "$work/time")"
}

for run in $(seq 1 "$RUNS"); do
    for i in "${!BINS[@]}"; do
        run_once "$i" true "${BINS[$i]}"
    done
    run_once 0 false "${BINS[0]} (current tables off)"
done
