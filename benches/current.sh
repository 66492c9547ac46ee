#!/usr/bin/env bash
# Current-state tables: the cost of a fold per changed row and per table size
# (BENCHMARKS.md, "Current-state tables"). For each size in BENCH_ROWS, a
# throwaway mariadbd (the test harness's) gets shop.big (INT auto-increment
# key, an INT, a 32-character string), sluice builds its current table, then
# folds 1 % recent changes (updates of the newest 0.5 %, 0.5 % new rows) and
# 1 % random updates (every 100th key). Prints a Markdown table: time of the
# folds of each run (from the "current tables folded" log lines), bytes the
# fold removed and added, the table's size.
#
#   benches/current.sh
#   BENCH_ROWS=2000000 BENCH_FILE_SIZE=128MiB benches/current.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite current::bench_fold_cost -- --ignored --nocapture --test-threads 1
