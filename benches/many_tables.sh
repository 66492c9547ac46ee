#!/usr/bin/env bash
# Many tables (BENCHMARKS.md, "Many tables"): the initial snapshot, the
# catch-up of single-row transactions, an idle start and `status` of a lake of
# BENCH_TABLES tables, on a throwaway mariadbd (the test harness's) and a
# local lake, or with BENCH_BACKEND=s3 on a moto_server behind a proxy that
# adds BENCH_DELAY_MS to every request; with BENCH_ROUTE=1 every table is
# routed into one lake table ([[routes]]). SLUICE_BENCH_BIN times another build.
# Prints a Markdown row.
#
#   benches/many_tables.sh                                   # 1,024 tables, local
#   BENCH_TABLES=8 benches/many_tables.sh
#   BENCH_ROUTE=1 benches/many_tables.sh                     # 1,024 shards into one table
#   BENCH_BACKEND=s3 BENCH_DELAY_MS=25 BENCH_TABLES=64 BENCH_ROWS=6400 BENCH_TXNS=3000 benches/many_tables.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite many_tables::bench_many_tables -- --ignored --nocapture --test-threads 1
