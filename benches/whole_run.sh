#!/usr/bin/env bash
# The e2e benchmark's sluice run alone, binaries alternating (A/B on a noisy
# machine): over the server that `KEEP=1 benches/e2e.sh` kept, each run
# streams the whole binlog into an empty lake with `run --until-caught-up`
# and the default config (folds on), or with current tables off
# (CURRENT=false: the stream alone). Prints each run's file count and its
# wall, user and system time and peak RSS. Without e2e.sh's workload
# generation between runs, three rounds of three binaries take about a
# minute.
#
#   KEEP=1 BULK_ROWS=1500000 SB_INSERT_EVENTS=20000 SB_WRITE_EVENTS=5000 RUNS=1 TOOLS=sluice benches/e2e.sh
#   benches/whole_run.sh /tmp/sluice-bench.XXXXXX SLUICE_BIN [SLUICE_BIN ...]
#
# Knobs: RUNS=3 (rounds); CURRENT=false; START=file:pos (default: the start
# position of benches/results/meta.json, the last e2e run's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=benches/lib.sh
source benches/lib.sh

KEPT="${1:?usage: benches/whole_run.sh KEPT_DIR SLUICE_BIN [SLUICE_BIN ...]}"
shift
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || { echo "error: name at least one sluice binary" >&2; exit 1; }
RUNS="${RUNS:-3}"
kept_server "$KEPT"
ensure_mariadb

work="$(mktemp -d -t sluice-whole-run.XXXXXX)"
cleanup() {
    server_stop
    rm -rf "$work"
}
trap cleanup EXIT
server_start "$KEPT"

for run in $(seq 1 "$RUNS"); do
    for bin in "${BINS[@]}"; do
        rm -rf "$work/run"
        mkdir -p "$work/run"
        bench_config "$work/run" bench "$PORT" "$START_FILE" "$START_POS"
        if [ -n "${CURRENT:-}" ]; then
            printf '\n[current]\nenabled = %s\n' "$CURRENT" >>"$work/run/sluice.toml"
        fi
        /usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KiB peak" -o "$work/time" \
            env SLUICE_SOURCE_PASSWORD=bench "$bin" run --config "$work/run/sluice.toml" --until-caught-up 2>"$work/run.err"
        echo "run $run $bin: $(find "$work/run/lake" -name '*.parquet' | wc -l) files, $(cat "$work/time")"
    done
done
