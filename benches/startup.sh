#!/usr/bin/env bash
# Start-up of an old lake (BENCHMARKS.md, "Start-up of an old lake"):
# `status` and an idle `run --until-caught-up` on a fresh lake, then on the
# same lake with BENCH_MANIFESTS copies of an idle checkpoint after its
# newest manifest (a lake checkpointing every 10 s for about four months at
# the default 1,000,000), first without the hint to the newest manifest (a
# lake of an earlier release), then with it. A throwaway mariadbd (the test
# harness's); BENCH_BACKEND=s3 puts the lake on a moto_server. Prints a
# Markdown table.
#
#   benches/startup.sh
#   BENCH_BACKEND=s3 BENCH_MANIFESTS=100000 benches/startup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo test --release --test suite startup::bench_startup_of_an_old_lake -- --ignored --nocapture --test-threads 1
