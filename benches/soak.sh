#!/usr/bin/env bash
# The soak benchmark (BENCHMARKS.md, "A lake that lasts: the soak"): a steady
# writer and two sidecars at interval = "1s", compaction on (its defaults)
# and off, for BENCH_SECONDS (default 3600); live files, checkpoint size and
# a DuckDB count(*) sampled every BENCH_SAMPLE seconds (default 60), plotted
# to BENCH_PLOT (default target/bench/soak.png).
#
#   benches/soak.sh
#   BENCH_SECONDS=600 BENCH_SAMPLE=20 BENCH_MIN_AGE=2m benches/soak.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite compaction::bench_soak -- --ignored --nocapture --test-threads 1
