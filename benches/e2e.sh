#!/usr/bin/env bash
# End-to-end benchmark: sluice against the transfer limit, the C decoder and
# two peers, over one binlog written by a standard workload.
#
#   benches/e2e.sh                 # the full run (15-20 minutes on 2 cores)
#   BULK_ROWS=100000 SB_INSERT_EVENTS=20000 SB_WRITE_EVENTS=5000 RUNS=1 benches/e2e.sh   # a quick look
#
# What it does, from a clean checkout:
#   1. installs what is missing: MariaDB server binaries and client, sysbench
#      (apt-get); mysql-replication (pip, into benches/.peers/venv);
#      @vlasky/zongji (npm, into benches/.peers/node); builds sluice --release;
#   2. starts a throwaway mariadbd (temporary data directory, own socket, a
#      free port on 127.0.0.1; never the machine's MariaDB service) with
#      log-bin, binlog_format=ROW, binlog_row_image=FULL, server-id=1;
#   3. creates the workload tables, records the start position, then writes
#      sysbench oltp_insert and oltp_write_only and the bulk phase on a wide
#      mixed-type table (INSERT ... SELECT of BULK_ROWS rows from a sequence,
#      all of them updated, half deleted; one statement each);
#   4. over that binlog (start position to the head after the workload) times
#      RUNS runs each of: mariadb-binlog --raw to local files (the transfer
#      limit), mariadb-binlog --verbose to /dev/null (the C decoder),
#      python-mysql-replication and zongji touching every value of every row,
#      and `sluice run --until-caught-up` into a fresh local lake each run
#      (binlog to committed Parquet, default [flush] settings);
#   5. prints a markdown table (medians) and writes it to
#      benches/results/latest.md (every run in benches/results/runs.tsv, the
#      context in meta.json; benches/report.py rebuilds the table from them).
#      Exits 1 if a tool's row count differs from mariadb-binlog's.
#
# Knobs (environment):
#   BULK_ROWS=1000000        rows of the wide table's bulk phase
#   SB_TABLES=4 SB_TABLE_SIZE=10000         sysbench tables (prepared before the start position)
#   SB_INSERT_EVENTS=200000  oltp_insert events (one row each)
#   SB_WRITE_EVENTS=60000    oltp_write_only transactions (4 row changes each)
#   SB_THREADS=2 SB_TIME_CAP=300            sysbench threads; seconds cap per sysbench run
#   RUNS=3                   timed runs per tool (the median is reported)
#   PY_RUNS=1                runs of python-mysql-replication: about 5 minutes each at
#                            full size, so one by default (PY_RUNS=3 for its median too)
#   TOOLS="raw cdecode python zongji sluice"  which tools to time; add
#                            sluice_http for sluice with [http] on and /metrics
#                            and / scraped every second (BENCHMARKS.md, "Monitoring"),
#                            sluice_bare for sluice without Delta commits
#                            (SLUICE_BENCH_NO_DELTA) and without current-table
#                            folds, sluice_delta for Delta commits without folds,
#                            sluice_fold2s for folds every 2 s instead of every
#                            minute (BENCHMARKS.md, "The lake as tables"),
#                            sluice_iceberg for sluice with [iceberg] enabled (an
#                            Iceberg snapshot after every Delta commit; BENCHMARKS.md,
#                            "Iceberg"),
#                            sluice_hash for sluice with `hash` on two columns of
#                            bench.wide, name and body (BENCHMARKS.md, "Column
#                            policies"), sluice_onefail for sluice with the Delta
#                            log of sbtest.sbtest1 unwritable (a regular file named
#                            _delta_log in its folder: every commit of that table
#                            fails; exit 3 is expected; BENCHMARKS.md, "One table
#                            whose Delta log cannot be written")
#   PROFILE=1                one more sluice run under `perf record`; top symbols
#                            into benches/results/profile.txt
#   QUIET_TIMEOUT=120        before each timed run, wait up to this many seconds for
#                            the machine to be idle (another build or test run skews it)
#   SLUICE_FLUSH='max_buffer_bytes = "64MiB"'   a [flush] section for sluice's config
#                            (default: none, so sluice's defaults)
#   SKIP_BUILD=1             use the sluice binary already built
#   SLUICE_BIN=PATH          time this sluice binary (no build)
#   SLUICE_BIN_B=PATH        adds the tool sluice_b: the same run with this other
#                            binary, interleaved with sluice's (before/after a change)
#   KEEP=1                   keep the temporary directory (server data, lakes)
#   CARGO_TARGET_DIR         where cargo builds (default ./target)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
# shellcheck source=scripts/common.sh
source scripts/common.sh

BULK_ROWS="${BULK_ROWS:-1000000}"
SB_TABLES="${SB_TABLES:-4}"
SB_TABLE_SIZE="${SB_TABLE_SIZE:-10000}"
SB_INSERT_EVENTS="${SB_INSERT_EVENTS:-200000}"
SB_WRITE_EVENTS="${SB_WRITE_EVENTS:-60000}"
SB_THREADS="${SB_THREADS:-2}"
SB_TIME_CAP="${SB_TIME_CAP:-300}"
RUNS="${RUNS:-3}"
# The column key of sluice_hash's policy (every sluice command reads it).
export SLUICE_COLUMN_KEY="${SLUICE_COLUMN_KEY:-a-benchmark-column-key}"
PY_RUNS="${PY_RUNS:-1}"
TOOLS="${TOOLS:-raw cdecode python zongji sluice}"
PROFILE="${PROFILE:-0}"
QUIET_TIMEOUT="${QUIET_TIMEOUT:-120}"
SKIP_BUILD="${SKIP_BUILD:-0}"
KEEP="${KEEP:-0}"
SLUICE_FLUSH="${SLUICE_FLUSH:-}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SLUICE="${SLUICE_BIN:-$TARGET_DIR/release/sluice}"
if [ -n "${SLUICE_BIN:-}" ]; then
    SKIP_BUILD=1
fi
PEERS="$ROOT/benches/.peers"
RESULTS="$ROOT/benches/results"
PYREPL_VERSION="1.0.17"
ZONGJI_VERSION="0.9.0"
DB_USER=bench
DB_PASS=bench

for n in QUIET_TIMEOUT BULK_ROWS SB_TABLES SB_TABLE_SIZE SB_INSERT_EVENTS SB_WRITE_EVENTS SB_THREADS SB_TIME_CAP RUNS PY_RUNS; do
    if ! [[ "${!n}" =~ ^[0-9]+$ ]]; then
        echo "error: $n must be a non-negative integer, got '${!n}'" >&2
        exit 2
    fi
done
if [ "$RUNS" -lt 1 ] || [ "$BULK_ROWS" -lt 2 ]; then
    echo "error: RUNS must be >= 1 and BULK_ROWS >= 2" >&2
    exit 2
fi

wants() { [[ " $TOOLS " == *" $1 "* ]]; }

# ---------------------------------------------------------------- installs

# shellcheck source=benches/lib.sh
source benches/lib.sh

ensure_mariadb
command -v mariadb-binlog >/dev/null 2>&1 || apt_install mariadb-client
command -v sysbench >/dev/null 2>&1 || apt_install sysbench
[ -x /usr/bin/time ] || apt_install time
command -v python3 >/dev/null 2>&1 || apt_install python3

mkdir -p "$PEERS" "$RESULTS"
if wants python && ! "$PEERS/venv/bin/python" -c 'import pymysqlreplication' 2>/dev/null; then
    banner "installing mysql-replication $PYREPL_VERSION (pip, into $PEERS/venv)"
    rm -rf "$PEERS/venv"
    if ! python3 -m venv "$PEERS/venv"; then
        apt_install python3-venv
        python3 -m venv "$PEERS/venv"
    fi
    "$PEERS/venv/bin/pip" install -q "mysql-replication==$PYREPL_VERSION"
fi
ZONGJI_MODULE="$PEERS/node/node_modules/@vlasky/zongji/index.js"
if wants zongji && [ ! -f "$ZONGJI_MODULE" ]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    banner "installing @vlasky/zongji $ZONGJI_VERSION (npm, into $PEERS/node)"
    mkdir -p "$PEERS/node"
    npm install --silent --no-audit --no-fund --prefix "$PEERS/node" "@vlasky/zongji@$ZONGJI_VERSION"
fi
export ZONGJI_MODULE

if [ "$SKIP_BUILD" != 1 ] && wants sluice; then
    banner "building sluice (cargo build --release, target dir $TARGET_DIR)"
    cargo build --release --bin sluice
fi
wants sluice && [ ! -x "$SLUICE" ] && { echo "error: $SLUICE not found (build it, or unset SKIP_BUILD)" >&2; exit 1; }

# ---------------------------------------------------------------- server

tmp="$(mktemp -d -t sluice-bench.XXXXXX)"
child_pid=""

cleanup() {
    local rc=$?
    set +e
    if [ -n "$child_pid" ] && kill -0 "$child_pid" 2>/dev/null; then
        # child_pid is /usr/bin/time: stop the tool it runs, then time itself.
        pkill -TERM -P "$child_pid" 2>/dev/null
        kill "$child_pid" 2>/dev/null
        wait "$child_pid" 2>/dev/null
    fi
    server_stop
    if [ "$KEEP" = 1 ]; then
        echo "kept $tmp"
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

server_start "$tmp"
port="$PORT"
SERVER_VERSION="$(sql -N -B -e 'SELECT VERSION()')"
echo "server: $SERVER_VERSION"

# ---------------------------------------------------------------- workload

banner "creating the user and the workload tables (sysbench prepare: $SB_TABLES x $SB_TABLE_SIZE rows)"
sql <<SQL
CREATE USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
CREATE USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '$DB_USER'@'%';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '$DB_USER'@'localhost';
CREATE DATABASE sbtest;
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
SQL
sb_common=(--db-driver=mysql --mysql-socket="$SOCK" --mysql-user=root --mysql-password=
    --mysql-db=sbtest --tables="$SB_TABLES" --table-size="$SB_TABLE_SIZE" --rand-seed=1)
sysbench oltp_insert "${sb_common[@]}" prepare >"$tmp/sysbench-prepare.log"

# This release of sluice stops at DDL on a captured table: every table exists
# before the start position.
read -r START_FILE START_POS _ < <(sql -N -B -e 'SHOW MASTER STATUS')
echo "start position: $START_FILE:$START_POS"

t0="$(date +%s.%N)"
banner "workload: sysbench oltp_insert ($SB_INSERT_EVENTS events, $SB_THREADS threads)"
if [ "$SB_INSERT_EVENTS" -gt 0 ]; then
    sysbench oltp_insert "${sb_common[@]}" --threads="$SB_THREADS" \
        --events="$SB_INSERT_EVENTS" --time="$SB_TIME_CAP" run >"$tmp/sysbench-insert.log"
    grep -E 'transactions:|queries:' "$tmp/sysbench-insert.log" | sed 's/^ */  /'
fi
banner "workload: sysbench oltp_write_only ($SB_WRITE_EVENTS transactions, $SB_THREADS threads)"
if [ "$SB_WRITE_EVENTS" -gt 0 ]; then
    sysbench oltp_write_only "${sb_common[@]}" --threads="$SB_THREADS" \
        --events="$SB_WRITE_EVENTS" --time="$SB_TIME_CAP" run >"$tmp/sysbench-write.log"
    grep -E 'transactions:|queries:' "$tmp/sysbench-write.log" | sed 's/^ */  /'
fi

banner "workload: bulk phase on bench.wide ($BULK_ROWS rows inserted, all updated, half deleted)"
sql <<SQL
SET time_zone = '+00:00';
INSERT INTO bench.wide (id, big, amount, name, created, seen, score, body, attrs, status)
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
FROM bench.seq_1_to_$BULK_ROWS;
SQL
echo "  inserted"
sql -e "UPDATE bench.wide SET amount = amount + 1.25, score = score * 1.5, status = 'returned',
        seen = seen + INTERVAL 1 HOUR, big = big DIV 3;"
echo "  updated"
sql -e "DELETE FROM bench.wide WHERE id % 2 = 0;"
echo "  deleted"
t1="$(date +%s.%N)"

# The head can move by itself for a moment after a rotation (MariaDB's binlog
# checkpoint event): wait until it has stood still for 3 seconds.
head_now() { sql -N -B -e 'SHOW MASTER STATUS' | cut -f1,2; }
HEAD="$(head_now)"
for _ in $(seq 1 20); do
    sleep 3
    h="$(head_now)"
    [ "$h" = "$HEAD" ] && break
    HEAD="$h"
done
read -r HEAD_FILE HEAD_POS <<<"$HEAD"
echo "head after the workload: $HEAD_FILE:$HEAD_POS (workload took $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b-a}') s)"

# Binlog bytes between the start position and the head.
BINLOG_BYTES="$(sql -N -B -e 'SHOW BINARY LOGS' | awk -v sf="$START_FILE" -v sp="$START_POS" \
    -v hf="$HEAD_FILE" -v hp="$HEAD_POS" '
    done { next }
    $1 == sf && $1 == hf { total = hp - sp; done = 1; next }
    $1 == sf { counting = 1; total += $2 - sp; next }
    $1 == hf && counting { total += hp; done = 1; next }
    counting { total += $2 }
    END { if (!done) exit 1; print total }')"
BINLOG_FILES="$(sql -N -B -e 'SHOW BINARY LOGS' | awk -v sf="$START_FILE" -v hf="$HEAD_FILE" '
    $1 == sf { on = 1 } on { printf "%s ", $1 } $1 == hf { on = 0 }')"
echo "binlog between start and head: $BINLOG_BYTES bytes in $BINLOG_FILES"

# ---------------------------------------------------------------- timing

binlog_remote=(--no-defaults --read-from-remote-server --host=127.0.0.1 --port="$port"
    --user="$DB_USER" --password="$DB_PASS")
# shellcheck disable=SC2206
files=($BINLOG_FILES)

banner "counting row changes with mariadb-binlog --verbose (untimed; also warms the page cache)"
EXPECTED_ROWS="$(mariadb-binlog "${binlog_remote[@]}" --base64-output=DECODE-ROWS --verbose \
    --start-position="$START_POS" --stop-position="$HEAD_POS" "${files[@]}" 2>"$tmp/count.err" \
    | grep -c -E '^### (INSERT INTO|UPDATE|DELETE FROM) ' || true)"
echo "row changes in the binlog: $EXPECTED_ROWS"

RUNS_TSV="$RESULTS/runs.tsv"
printf 'tool\trun\telapsed_s\tuser_s\tsys_s\tmaxrss_kib\tserver_cpu_s\tother_cpu_s\trows\n' >"$RUNS_TSV"

# CPU accounting around each timed run: the whole machine's busy time (from
# /proc/stat) and the server's own (from /proc/PID/stat), in clock ticks. What
# is neither the tool's nor the server's is "others": noise from anything else
# running on the machine (a quiet machine shows almost 0).
CLK_TCK="$(getconf CLK_TCK)"
cpu_busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
server_cpu() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

# Waits (up to QUIET_TIMEOUT seconds) until the machine is quiet: less than
# 0.1 core busy over one second. Timings taken while another build or test
# suite runs are not worth much; "others" in the table shows what remained.
wait_quiet() {
    local waited=0 a b
    while :; do
        a="$(cpu_busy)"
        sleep 1
        b="$(cpu_busy)"
        if awk -v a="$a" -v b="$b" -v hz="$CLK_TCK" 'BEGIN{exit !((b - a) / hz < 0.1)}'; then
            return 0
        fi
        waited=$((waited + 1))
        if [ "$waited" -ge "$QUIET_TIMEOUT" ]; then
            echo "  (the machine is still busy after ${QUIET_TIMEOUT}s: timing anyway)"
            return 0
        fi
    done
}

# timed TOOL RUN ROWS-FILE CMD...: runs CMD under /usr/bin/time, stdout to
# ROWS-FILE, and appends a line to runs.tsv (rows filled in by the caller).
timed() {
    local tool="$1" run="$2" out="$3"
    shift 3
    local tf="$tmp/time.$tool.$run" busy0 srv0
    wait_quiet
    busy0="$(cpu_busy)"
    srv0="$(server_cpu)"
    /usr/bin/time -f '%e %U %S %M' -o "$tf" "$@" >"$out" 2>"$tmp/$tool.$run.err" &
    child_pid=$!
    if ! wait "$child_pid"; then
        child_pid=""
        echo "error: $tool run $run failed; its stderr:" >&2
        tail -n 30 "$tmp/$tool.$run.err" >&2
        return 1
    fi
    child_pid=""
    read -r TIME_E TIME_U TIME_S TIME_M <"$tf"
    local busy1 srv1
    busy1="$(cpu_busy)"
    srv1="$(server_cpu)"
    TIME_SRV="$(awk -v a="$srv0" -v b="$srv1" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}')"
    TIME_OTHER="$(awk -v a="$busy0" -v b="$busy1" -v hz="$CLK_TCK" -v u="$TIME_U" -v s="$TIME_S" -v srv="$TIME_SRV" \
        'BEGIN{o = (b-a)/hz - u - s - srv; if (o < 0) o = 0; printf "%.2f", o}')"
}

record() { # tool run rows
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$TIME_E" "$TIME_U" "$TIME_S" "$TIME_M" \
        "$TIME_SRV" "$TIME_OTHER" "$3" >>"$RUNS_TSV"
    printf '  %-8s run %s: %7.2f s  cpu %6.2f s  server cpu %6.2f s  others %5.2f s  rss %5d MiB  rows %s\n' \
        "$1" "$2" "$TIME_E" "$(awk -v u="$TIME_U" -v s="$TIME_S" 'BEGIN{print u+s}')" "$TIME_SRV" "$TIME_OTHER" \
        "$((TIME_M / 1024))" "$3"
}

json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }

run_raw() {
    local i="$1" dir="$tmp/raw"
    rm -rf "$dir"
    mkdir -p "$dir"
    timed raw "$i" /dev/null mariadb-binlog "${binlog_remote[@]}" --raw --result-file="$dir/" \
        --start-position="$START_POS" "${files[@]}"
    RAW_BYTES="$(du -cb "$dir"/* | tail -1 | cut -f1)"
    rm -rf "$dir"
    record raw "$i" "$EXPECTED_ROWS"
}

run_cdecode() {
    timed cdecode "$1" /dev/null mariadb-binlog "${binlog_remote[@]}" --verbose \
        --start-position="$START_POS" --stop-position="$HEAD_POS" "${files[@]}"
    record cdecode "$1" "$EXPECTED_ROWS"
}

run_python() {
    local out="$tmp/python.$1.out"
    timed python "$1" "$out" "$PEERS/venv/bin/python" "$ROOT/benches/peers/pyrepl_rows.py" \
        127.0.0.1 "$port" "$DB_USER" "$DB_PASS" 5402 "$START_FILE" "$START_POS" "$HEAD_FILE" "$HEAD_POS"
    record python "$1" "$(json_field rows <"$out")"
}

run_zongji() {
    local out="$tmp/zongji.$1.out"
    timed zongji "$1" "$out" node "$ROOT/benches/peers/zongji_rows.mjs" \
        127.0.0.1 "$port" "$DB_USER" "$DB_PASS" 5403 "$START_FILE" "$START_POS" "$HEAD_FILE" "$HEAD_POS"
    record zongji "$1" "$(json_field rows <"$out")"
}

sluice_config() { # dir -> writes dir/sluice.toml (default [flush] settings)
    bench_config "$1" "$DB_USER" "$port" "$START_FILE" "$START_POS"
    if [ -n "$SLUICE_FLUSH" ]; then
        printf '\n[flush]\n%s\n' "$SLUICE_FLUSH" >>"$1/sluice.toml"
    fi
}

# scrape PORT: GETs /metrics and the status page every second until killed.
scrape() {
    while true; do
        curl -s -o /dev/null "http://127.0.0.1:$1/metrics" || true
        curl -s -o /dev/null "http://127.0.0.1:$1/" || true
        sleep 1
    done
}

run_sluice() { # run [http|bare|delta|fold2s|iceberg|hash|onefail|b]
    local tool="sluice" dir="$tmp/sluice.$1" scraper="" http_port no_delta=""
    rm -rf "$dir"
    sluice_config "$dir"
    if [ "${2:-}" = bare ] || [ "${2:-}" = delta ]; then
        tool="sluice_${2}"
        printf '\n[current]\nenabled = false\n' >>"$dir/sluice.toml"
        if [ "$2" = bare ]; then no_delta=1; fi
    fi
    if [ "${2:-}" = hash ]; then
        tool="sluice_hash"
        printf '\n[[columns]]\nmatch = %s\naction = "hash"\n' "'bench\.wide\.(name|body)'" >>"$dir/sluice.toml"
    fi
    if [ "${2:-}" = iceberg ]; then
        tool="sluice_iceberg"
        printf '\n[iceberg]\nenabled = true\n' >>"$dir/sluice.toml"
    fi
    if [ "${2:-}" = fold2s ]; then
        tool="sluice_fold2s"
        printf '\n[current]\nrefresh = "2s"\n' >>"$dir/sluice.toml"
    fi
    local bin="$SLUICE"
    if [ "${2:-}" = b ]; then
        tool="sluice_b"
        bin="$SLUICE_BIN_B"
    fi
    local expect_rc=0
    if [ "${2:-}" = onefail ]; then
        tool="sluice_onefail"
        mkdir -p "$dir/lake/sbtest/sbtest1"
        : >"$dir/lake/sbtest/sbtest1/_delta_log"
        # The run ends with that table's Delta log behind: exit 3.
        expect_rc=3
    fi
    if [ "${2:-}" = http ]; then
        tool="sluice_http"
        http_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
        printf '\n[http]\nlisten = "127.0.0.1:%s"\n' "$http_port" >>"$dir/sluice.toml"
        scrape "$http_port" &
        scraper=$!
    fi
    timed "$tool" "$1" /dev/null env SLUICE_SOURCE_PASSWORD="$DB_PASS" \
        ${no_delta:+SLUICE_BENCH_NO_DELTA=1} \
        bash -c '"$@"; rc=$?; [ "$rc" -eq '"$expect_rc"' ] && exit 0; exit "$rc"' run \
        "$bin" run --config "$dir/sluice.toml" --until-caught-up
    if [ -n "$scraper" ]; then
        kill "$scraper" 2>/dev/null || true
        wait "$scraper" 2>/dev/null || true
    fi
    # When the stream caught up (its throughput) and what the folds took,
    # from sluice's log: the wall time above also holds the last fold.
    python3 - "$tmp/$tool.$1.err" <<'PY'
import re, sys
from datetime import datetime
first = caught = None
folds = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(\d{4}-\d\d-\d\dT[\d:.]+)Z", line)
    if not m:
        continue
    t = datetime.fromisoformat(m.group(1)[:26])
    first = first or t
    if caught is None and "caught up with the binlog head" in line:
        caught = t
    f = re.search(r"current tables folded.*", line) and re.search(r"\bms=(\d+)", line)
    if f:
        folds.append(int(f.group(1)))
if first and caught:
    print(f"  stream caught up after {(caught - first).total_seconds():.2f} s; "
          f"folds: {len(folds)}, {sum(folds)} ms in all, the last {folds[-1] if folds else 0} ms")
PY
    local status rows cursor
    status="$(SLUICE_SOURCE_PASSWORD="$DB_PASS" "$SLUICE" status --config "$dir/sluice.toml" --json)"
    rows="$(python3 -c 'import json,sys; print(sum(json.load(sys.stdin)["tables"].values()))' <<<"$status")"
    cursor="$(python3 -c 'import json,sys; c=json.load(sys.stdin)["cursor"]; print("%s:%s" % (c["file"], c["pos"]))' <<<"$status")"
    if [ "$cursor" != "$HEAD_FILE:$HEAD_POS" ]; then
        echo "warning: sluice's committed cursor $cursor is not the head $HEAD_FILE:$HEAD_POS" >&2
    fi
    SLUICE_LAKE_BYTES="$(du -sb "$dir/lake" | cut -f1)"
    SLUICE_FILES="$(find "$dir/lake" -name '*.parquet' | wc -l)"
    rm -rf "$dir"
    record "$tool" "$1" "$rows"
}

banner "timing: $RUNS runs each of: $TOOLS (python: $PY_RUNS runs), interleaved"
for i in $(seq 1 "$RUNS"); do
    wants raw && run_raw "$i"
    wants cdecode && run_cdecode "$i"
    if wants python && [ "$i" -le "$PY_RUNS" ]; then run_python "$i"; fi
    wants zongji && run_zongji "$i"
    wants sluice && run_sluice "$i"
    wants sluice_http && run_sluice "$i" http
    wants sluice_bare && run_sluice "$i" bare
    wants sluice_delta && run_sluice "$i" delta
    wants sluice_fold2s && run_sluice "$i" fold2s
    wants sluice_iceberg && run_sluice "$i" iceberg
    wants sluice_hash && run_sluice "$i" hash
    wants sluice_onefail && run_sluice "$i" onefail
    if [ -n "${SLUICE_BIN_B:-}" ]; then run_sluice "$i" b; fi
done

if [ "$PROFILE" = 1 ] && wants sluice && ! command -v perf >/dev/null 2>&1; then
    echo "warning: PROFILE=1 but perf is not installed (Debian: apt-get install linux-perf); no profile" >&2
elif [ "$PROFILE" = 1 ] && wants sluice; then
    banner "profiling one more sluice run (perf record, cpu-clock, DWARF call graphs)"
    dir="$tmp/sluice.profile"
    sluice_config "$dir"
    if SLUICE_SOURCE_PASSWORD="$DB_PASS" perf record -e cpu-clock -F 199 --call-graph dwarf,16384 -o "$tmp/perf.data" \
        "$SLUICE" run --config "$dir/sluice.toml" --until-caught-up 2>"$tmp/perf.err"; then
        perf report -i "$tmp/perf.data" --no-children --sort comm --stdio -g none \
            >"$tmp/perf.comm.txt" 2>/dev/null || true
        perf report -i "$tmp/perf.data" --no-children --sort dso,sym --stdio -g none \
            >"$tmp/perf.sym.txt" 2>/dev/null || true
        perf report -i "$tmp/perf.data" --children --sort sym --stdio -g none \
            >"$tmp/perf.incl.txt" 2>/dev/null || true
        {
            echo "# perf profile of sluice run --until-caught-up ($EXPECTED_ROWS row changes)"
            echo
            echo "## by thread"
            awk '!/^#/ && NF && n++ < 20' "$tmp/perf.comm.txt"
            echo
            echo "## by symbol (self time)"
            awk '!/^#/ && NF && n++ < 60' "$tmp/perf.sym.txt"
            echo
            echo "## by function, callees included (children, self)"
            awk '!/^#/ && NF && n++ < 80' "$tmp/perf.incl.txt"
        } >"$RESULTS/profile.txt"
        echo "wrote $RESULTS/profile.txt"
    else
        echo "warning: perf record failed (see below); no profile" >&2
        tail -5 "$tmp/perf.err" >&2
    fi
fi

# ---------------------------------------------------------------- report

banner "results"
MACHINE="$(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
if [ -n "${SLUICE_BIN:-}" ]; then
    SLUICE_REV="$SLUICE_BIN"
else
    SLUICE_REV="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
fi
export MACHINE SLUICE_REV SERVER_VERSION BULK_ROWS SB_TABLES SB_TABLE_SIZE SB_INSERT_EVENTS SB_WRITE_EVENTS \
    SB_THREADS START_FILE START_POS HEAD_FILE HEAD_POS BINLOG_BYTES EXPECTED_ROWS PYREPL_VERSION ZONGJI_VERSION
export LAKE_BYTES="${SLUICE_LAKE_BYTES:-}" LAKE_FILES="${SLUICE_FILES:-}" SLUICE_FLUSH
NODE_VERSION="$(node --version 2>/dev/null || echo -)"
DATE="$(date -u +%Y-%m-%dT%H:%MZ)"
export NODE_VERSION DATE
python3 - "$RESULTS/meta.json" <<'PY'
import json, os, sys
e = os.environ
meta = {
    "date": e["DATE"], "sluice_rev": e["SLUICE_REV"], "server_version": e["SERVER_VERSION"],
    "machine": e["MACHINE"], "bulk_rows": int(e["BULK_ROWS"]), "sb_tables": int(e["SB_TABLES"]),
    "sb_table_size": int(e["SB_TABLE_SIZE"]), "sb_insert_events": int(e["SB_INSERT_EVENTS"]),
    "sb_write_events": int(e["SB_WRITE_EVENTS"]), "sb_threads": int(e["SB_THREADS"]),
    "start": f"{e['START_FILE']}:{e['START_POS']}", "head": f"{e['HEAD_FILE']}:{e['HEAD_POS']}",
    "binlog_bytes": int(e["BINLOG_BYTES"]), "rows": int(e["EXPECTED_ROWS"]),
    "pyrepl_version": e["PYREPL_VERSION"], "zongji_version": e["ZONGJI_VERSION"],
    "node_version": e["NODE_VERSION"], "lake_bytes": e["LAKE_BYTES"], "lake_files": e["LAKE_FILES"],
    "sluice_flush": e["SLUICE_FLUSH"],
}
with open(sys.argv[1], "w") as f:
    json.dump(meta, f, indent=2)
PY
python3 "$ROOT/benches/report.py" "$RESULTS"
