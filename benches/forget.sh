#!/usr/bin/env bash
# `sluice forget` of keys spread over a large table's changelog (BENCHMARKS.md,
# "Erasure"): a throwaway mariadbd (the test harness's) gets shop.big
# (BENCH_ROWS rows, inserted a million per transaction, 1 % updated once),
# sluice writes its changelog and current table with its default [flush], then
# `sluice forget --keys-file` erases BENCH_KEYS keys picked by a
# multiplicative hash. Prints a Markdown row: wall, user and system time and
# peak RSS of the forget (/usr/bin/time), the tables' live files and bytes,
# and what the erasure rewrote (from its record).
#
#   benches/forget.sh                                   # 1M rows, 1000 keys
#   BENCH_ROWS=10000000 benches/forget.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite forget::bench_forget -- --ignored --nocapture --test-threads 1
