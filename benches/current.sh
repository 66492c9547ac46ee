#!/usr/bin/env bash
# Current-state tables: the cost of a fold per changed row and per table size,
# with deletion vectors and without (BENCHMARKS.md, "Current-state tables").
# For each size in BENCH_ROWS and each setting in BENCH_VECTORS ("auto,never"),
# a throwaway mariadbd (the test harness's) gets shop.big (INT auto-increment
# key, an INT, a 32-character string), sluice builds its current table, then
# folds 0.1 % and 1 % random updates (keys picked by a multiplicative hash),
# 0.1 % again, and 1 % recent changes (updates of the newest 0.5 %, 0.5 % new
# rows). Prints a Markdown table: fold time (from the "current tables folded"
# log lines), bytes written (new files and vector files) and their ratio to
# the changed rows' share of the table, bytes removed, live files, the
# table's size, peak RSS of the whole run.
#
#   benches/current.sh
#   BENCH_ROWS=10000000 BENCH_FILE_SIZE=128MiB benches/current.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite current::bench_fold_cost -- --ignored --nocapture --test-threads 1
