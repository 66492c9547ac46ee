#!/usr/bin/env bash
# Snapshot benchmark: sluice's initial snapshot of one wide table into
# committed Parquet, side by side in one run with `mariadb-dump --tab` of the
# same table (the C tool, writing text files) and `mariadb -e 'SELECT *'` to
# /dev/null (what the protocol can deliver).
#
#   benches/snapshot.sh                  # ROWS=10000000 (about 15 minutes to load on 2 cores)
#   ROWS=1000000 benches/snapshot.sh     # a quick look
#
# It starts a throwaway mariadbd (benches/lib.sh; never the machine's MariaDB
# service), loads bench.wide (the e2e benchmark's wide mixed-type table) with
# ROWS rows, then times each tool RUNS times on the idle server and reports
# rows/s and the peak RSS (/usr/bin/time). sluice runs with its default
# configuration (chunk_rows = 20000, max_buffer_bytes = 96MiB) and
# `--until-caught-up`, which returns once the snapshot is committed.
#
# Knobs: ROWS, RUNS=1, SKIP_BUILD=1, SLUICE_BIN=PATH, KEEP=1, SLUICE_SNAPSHOT
# (extra lines for the [snapshot] section, e.g. 'chunk_rows = 50000'),
# LAG_TPS=1000 (after the timed runs, one more snapshot into a fresh lake while
# a writer commits LAG_TPS single-row transactions per second to another
# table; the stream's committed lag, sluice_lag_seconds from /metrics, is
# sampled every second until the snapshot is done; 0 skips it), LAG_FLUSH
# (lines of that run's [flush] section, e.g. 'interval = "2s"'), TIMED=0 (skip
# the timed runs), CURRENT_OFF=1 (time sluice a second time per run with
# `[current] enabled = false`, as `sluice_nocurrent`: the snapshot without the
# current table's first fold).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROWS="${ROWS:-10000000}"
RUNS="${RUNS:-1}"
SLUICE_SNAPSHOT="${SLUICE_SNAPSHOT:-}"
LAG_TPS="${LAG_TPS:-0}"
LAG_FLUSH="${LAG_FLUSH:-}"
TIMED="${TIMED:-1}"

ensure_mariadb
SLUICE="${SLUICE_BIN:-$ROOT/target/release/sluice}"
if [ -z "${SLUICE_BIN:-}" ] && [ "${SKIP_BUILD:-0}" != 1 ]; then
    banner "building sluice (cargo build --release)"
    cargo build --release --bin sluice
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/sluice-snapbench-XXXXXX")"
cleanup() {
    server_stop
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
server_start "$tmp"

banner "loading bench.wide with $ROWS rows"
sql <<SQL
CREATE DATABASE bench;
CREATE TABLE bench.wide (
    id      INT NOT NULL PRIMARY KEY,
    big     BIGINT UNSIGNED NOT NULL,
    amount  DECIMAL(12,2) NOT NULL,
    name    VARCHAR(64) NOT NULL,
    created DATETIME(6) NOT NULL,
    seen    TIMESTAMP NULL,
    score   DOUBLE,
    body    TEXT,
    attrs   JSON,
    status  ENUM('new','paid','shipped','cancelled','returned') NOT NULL
) ENGINE=InnoDB;
CREATE USER bench@'%' IDENTIFIED BY 'bench';
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT, FILE ON *.* TO bench@'%';
SQL
load_started="$(date +%s)"
step=1000000
for ((from = 1; from <= ROWS; from += step)); do
    to=$((from + step - 1))
    [ "$to" -gt "$ROWS" ] && to="$ROWS"
    sql bench <<SQL
SET time_zone = '+00:00';
INSERT INTO bench.wide
SELECT seq,
       CAST(CONV(LEFT(MD5(seq), 16), 16, 10) AS UNSIGNED),
       (seq * 7919 % 100000000) / 100,
       CONCAT('customer-', seq, '-', LEFT(SHA1(seq), 16)),
       TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL (seq * 7 % 1000000) MICROSECOND,
       FROM_UNIXTIME(1700000000 + seq),
       SQRT(seq) * 1000.125,
       CONCAT(REPEAT(MD5(seq), 6), LEFT(SHA1(seq), 8)),
       JSON_OBJECT('id', seq, 'sku', CONCAT('SKU-', seq % 5000), 'qty', seq % 17,
                   'tags', JSON_ARRAY('red', 'blue', seq % 3)),
       ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled')
FROM seq_${from}_to_${to};
SQL
done
echo "loaded in $(($(date +%s) - load_started)) s"
sql -e "ANALYZE TABLE bench.wide" >/dev/null

results="$tmp/results.tsv"
: >"$results"
# timed NAME COMMAND...: wall seconds, peak RSS (KiB) and CPU seconds
# (user + sys) of one run.
timed() {
    local name="$1"
    shift
    local t0 t1 rss user sys
    t0="$(date +%s.%N)"
    /usr/bin/time -f '%M %U %S' -o "$tmp/rss" "$@"
    t1="$(date +%s.%N)"
    read -r rss user sys <"$tmp/rss"
    printf '%s\t%s\t%s\t%s\n' "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$rss" \
        "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" >>"$results"
}

for run in $(seq 1 "$RUNS"); do
    [ "$TIMED" = 1 ] || break
    banner "run $run: mariadb -e 'SELECT * FROM bench.wide' > /dev/null"
    timed select mariadb --no-defaults --socket="$SOCK" -uroot --quick -N -B -e 'SELECT * FROM bench.wide' >/dev/null

    banner "run $run: mariadb-dump --tab"
    rm -rf "$tmp/tab" && mkdir -p "$tmp/tab" && chmod 777 "$tmp/tab"
    timed dump_tab mariadb-dump --no-defaults --socket="$SOCK" -uroot --tab="$tmp/tab" bench wide

    for variant in sluice ${CURRENT_OFF:+sluice_nocurrent}; do
        banner "run $run: $variant (initial snapshot into a fresh local lake)"
        rm -rf "$tmp/lake" "$tmp/state"
        read -r file pos _ < <(sql -N -B -e 'SHOW MASTER STATUS')
        current=""
        if [ "$variant" = sluice_nocurrent ]; then current=$'[current]\nenabled = false'; fi
        cat >"$tmp/sluice.toml" <<TOML
[source]
url = "mysql://bench@127.0.0.1:$PORT"
server_id = 5401
start = { file = "$file", pos = $pos }
[filter]
include = ['bench\.wide']
[sink]
url = "$tmp/lake"
[state]
dir = "$tmp/state"
[snapshot]
mode = "initial"
$SLUICE_SNAPSHOT
$current
TOML
        SLUICE_SOURCE_PASSWORD=bench RUST_LOG=warn timed "$variant" "$SLUICE" run --config "$tmp/sluice.toml" --until-caught-up
        committed="$(SLUICE_SOURCE_PASSWORD=bench "$SLUICE" status --config "$tmp/sluice.toml" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"]["bench.wide"]["rows"])')"
        if [ "$committed" != "$ROWS" ]; then
            echo "error: sluice committed $committed snapshot rows, the table has $ROWS" >&2
            exit 1
        fi
    done
done

if [ "$LAG_TPS" -gt 0 ]; then
    banner "the stream's lag during the snapshot, a writer at $LAG_TPS transactions/s"
    sql -e "CREATE TABLE bench.live (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, note VARCHAR(40)) ENGINE=InnoDB"
    rm -rf "$tmp/lake" "$tmp/state"
    read -r file pos _ < <(sql -N -B -e 'SHOW MASTER STATUS')
    http_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    cat >"$tmp/sluice.toml" <<TOML
[source]
url = "mysql://bench@127.0.0.1:$PORT"
server_id = 5401
start = { file = "$file", pos = $pos }
[filter]
include = ['bench\..*']
[sink]
url = "$tmp/lake"
[state]
dir = "$tmp/state"
[snapshot]
mode = "initial"
$SLUICE_SNAPSHOT
[http]
listen = "127.0.0.1:$http_port"
[flush]
$LAG_FLUSH
TOML
    # The writer: paced single-row INSERTs (autocommit: one transaction
    # each) into one client connection.
    python3 - "$LAG_TPS" <<'PY' | mariadb --no-defaults --socket="$SOCK" -uroot bench &
import sys, time
tps = int(sys.argv[1])
start = time.time()
n = 0
try:
    while True:
        due = int((time.time() - start) * tps)
        while n < due:
            n += 1
            sys.stdout.write(f"INSERT INTO live (v, note) VALUES ({n}, 'row {n}');\n")
        sys.stdout.flush()
        time.sleep(0.01)
except BrokenPipeError:
    pass  # the client was stopped: the benchmark is over
PY
    writer=$!
    SLUICE_SOURCE_PASSWORD=bench RUST_LOG=warn "$SLUICE" run --config "$tmp/sluice.toml" &
    sluice_pid=$!
    # Sample the lag every second until the snapshot is done.
    python3 - "$http_port" "$tmp/lag.tsv" <<'PY'
import sys, time, urllib.request
port, out = sys.argv[1], sys.argv[2]
samples, started = [], time.time()
seen_running = False
while time.time() - started < 3600:
    time.sleep(1)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except Exception:
        continue
    lag, running = None, False
    for line in text.splitlines():
        if line.startswith("sluice_lag_seconds "):
            lag = float(line.split()[-1])
        # sluice_snapshot_state{table="…",state="running"} 1
        if line.startswith("sluice_snapshot_state{") and 'state="running"' in line:
            running = running or float(line.split()[-1]) > 0
    if running:
        seen_running = True
    if lag is not None and lag == lag:
        samples.append((round(time.time() - started), lag))
    if seen_running and not running:
        break
with open(out, "w") as f:
    for t, l in samples:
        f.write(f"{t}\t{l}\n")
lags = sorted(l for _, l in samples)
if lags:
    print(f"lag samples: {len(lags)} over {samples[-1][0]} s; median {lags[len(lags)//2]:.1f} s, "
          f"p95 {lags[int(len(lags)*0.95)]:.1f} s, max {lags[-1]:.1f} s")
else:
    print("no lag samples")
PY
    kill "$writer" 2>/dev/null || true
    kill -TERM "$sluice_pid" 2>/dev/null || true
    wait "$sluice_pid" 2>/dev/null || true
    echo "writer committed $(sql -N -B -e 'SELECT COUNT(*) FROM bench.live') rows"
fi

banner "results ($ROWS rows, median of $RUNS)"
python3 - "$results" "$ROWS" <<'PY'
import statistics, sys
rows = int(sys.argv[2])
runs = {}
for line in open(sys.argv[1]):
    name, secs, rss, cpu = line.split("\t")
    runs.setdefault(name, []).append((float(secs), int(rss), float(cpu)))
print("| tool | seconds | rows/s | CPU s (user+sys) | peak RSS MiB |")
print("|---|---|---|---|---|")
for name in ("select", "dump_tab", "sluice", "sluice_nocurrent"):
    if name not in runs:
        continue
    secs = statistics.median(s for s, _, _ in runs[name])
    cpu = statistics.median(c for _, _, c in runs[name])
    rss = max(r for _, r, _ in runs[name]) / 1024
    each = ", ".join(f"{s:.2f}" for s, _, _ in runs[name])
    print(f"| {name} | {secs:.2f} ({each}) | {rows / secs:,.0f} | {cpu:.2f} | {rss:.0f} |")
PY
