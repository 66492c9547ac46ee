#!/usr/bin/env bash
# The one-command demo: a private MariaDB with a small shop, sluice copying its
# binlog into ./demo-lake, and the numbers to compare.
#
#   scripts/demo.sh
#
# It installs the MariaDB server binaries with apt-get if they are missing,
# builds sluice, starts its own mariadbd (temporary data directory, own socket,
# a free port on 127.0.0.1; never the machine's MariaDB service), writes a few
# thousand changes, runs `sluice run --until-caught-up`, and prints sluice's
# status next to the source's row counts. On exit the server is stopped and
# the temporary directory removed; ./demo-lake is kept.
#
# SKIP_SLUICE=1 does everything except building and running sluice (useful to
# try the database part alone).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh

SKIP_SLUICE="${SKIP_SLUICE:-0}"
LAKE="$PWD/demo-lake"
SLUICE=target/release/sluice

ensure_mariadb

if [ "$SKIP_SLUICE" != 1 ]; then
    banner "building sluice (cargo build --release)"
    cargo build --release
fi

tmp="$(mktemp -d -t sluice-demo.XXXXXX)"
sock="$tmp/mysqld.sock"
pidfile="$tmp/mysqld.pid"
server_pid=""

# Stops our own server (by the pid we started) and removes the temporary dir.
cleanup() {
    local rc=$?
    set +e
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        echo "stopping the demo MariaDB (pid $server_pid)"
        mariadb-admin --no-defaults --socket="$sock" -uroot shutdown >/dev/null 2>&1 \
            || kill "$server_pid" 2>/dev/null
        for _ in $(seq 1 300); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$server_pid" 2>/dev/null; then
            kill -9 "$server_pid" 2>/dev/null
        fi
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free TCP port on 127.0.0.1 (the kernel's pick when python3 is there).
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
        return
    fi
    local p
    for _ in $(seq 1 100); do
        p=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    echo "error: no free port found" >&2
    return 1
}

# mariadbd refuses to run as root unless told to; as another user it runs as that user.
user_args=()
if [ "$(id -u)" -eq 0 ]; then
    user_args=(--user=root)
fi

banner "creating a MariaDB data directory in $tmp/data"
mariadb-install-db --no-defaults "${user_args[@]}" --datadir="$tmp/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    exit 1
}

port="$(free_port)"
banner "starting mariadbd on 127.0.0.1:$port (socket $sock)"
"$MARIADBD" --no-defaults "${user_args[@]}" \
    --datadir="$tmp/data" \
    --socket="$sock" \
    --port="$port" \
    --bind-address=127.0.0.1 \
    --skip-networking=0 \
    --log-bin="$tmp/data/binlog" \
    --server-id=1 \
    --binlog-format=ROW \
    --binlog-row-image=FULL \
    --pid-file="$pidfile" \
    --log-error="$tmp/mysqld.err" >"$tmp/mysqld.out" 2>&1 &
server_pid=$!

for _ in $(seq 1 600); do
    if mariadb-admin --no-defaults --socket="$sock" -uroot ping >/dev/null 2>&1; then
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "error: mariadbd exited during start-up; its output:" >&2
        cat "$tmp/mysqld.out" "$tmp/mysqld.err" >&2 || true
        exit 1
    fi
    sleep 0.1
done
if ! mariadb-admin --no-defaults --socket="$sock" -uroot ping >/dev/null 2>&1; then
    echo "error: mariadbd did not answer within 60s; its log:" >&2
    cat "$tmp/mysqld.err" >&2 || true
    exit 1
fi

sql() {
    mariadb --no-defaults --socket="$sock" -uroot "$@"
}
echo "server: $(sql -N -B -e 'SELECT VERSION()')"

banner "creating the replication user and the shop schema"
sql <<'SQL'
CREATE USER 'repl'@'%' IDENTIFIED BY 'demo';
CREATE USER 'repl'@'localhost' IDENTIFIED BY 'demo';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'localhost';

CREATE DATABASE shop;
CREATE TABLE shop.customers (
    id INT PRIMARY KEY AUTO_INCREMENT,
    name VARCHAR(100),
    email VARCHAR(200),
    created_at DATETIME(6)
);
CREATE TABLE shop.products (
    id INT PRIMARY KEY,
    sku VARCHAR(32),
    price DECIMAL(10,2),
    stock INT UNSIGNED,
    tags SET('new','sale','eco')
);
CREATE TABLE shop.orders (
    id BIGINT PRIMARY KEY AUTO_INCREMENT,
    customer_id INT,
    product_id INT,
    qty SMALLINT,
    status ENUM('new','paid','shipped','cancelled'),
    note TEXT,
    placed_at TIMESTAMP(3)
);
SQL

# This release of sluice stops at DDL on a captured table, so it starts
# reading after the schema exists.
read -r binlog_file binlog_pos _ < <(sql -N -B -e 'SHOW MASTER STATUS')
echo "sluice will start at $binlog_file:$binlog_pos"

# Deterministic changes: 500 customers, 200 products and 3000 orders inserted
# in multi-row transactions, then 800 order updates and 300 order deletes.
generate_changes() {
    local i j tx row rows
    local tagsets=("" "new" "sale" "eco" "new,sale" "sale,eco" "new,sale,eco")
    local statuses_note=("NULL" "'gift wrap'" "'leave at the door'" "'call first'" "NULL")
    RANDOM=42
    echo "SET time_zone = '+00:00';"
    for tx in 0 1 2 3 4; do
        rows=()
        for j in $(seq 1 100); do
            i=$((tx * 100 + j))
            rows+=("('Customer $i', 'customer$i@example.com', NOW(6) - INTERVAL $((RANDOM * 37)) SECOND)")
        done
        echo "BEGIN;"
        (IFS=,; echo "INSERT INTO shop.customers (name, email, created_at) VALUES ${rows[*]};")
        echo "COMMIT;"
    done
    rows=()
    for i in $(seq 1 200); do
        rows+=("($i, 'SKU-$(printf %05d "$i")', $((RANDOM % 20000 + 99)).$((RANDOM % 100)), $((RANDOM % 1000)), '${tagsets[RANDOM % 7]}')")
    done
    (IFS=,; echo "INSERT INTO shop.products (id, sku, price, stock, tags) VALUES ${rows[*]};")
    for tx in $(seq 0 29); do
        echo "BEGIN;"
        for _ in 1 2; do
            rows=()
            for _ in $(seq 1 50); do
                row="($((RANDOM % 500 + 1)), $((RANDOM % 200 + 1)), $((RANDOM % 5 + 1)), 'new', ${statuses_note[RANDOM % 5]}"
                rows+=("$row, NOW(3) - INTERVAL $((RANDOM % 86400)) SECOND)")
            done
            (IFS=,; echo "INSERT INTO shop.orders (customer_id, product_id, qty, status, note, placed_at) VALUES ${rows[*]};")
        done
        echo "COMMIT;"
    done
    for tx in 0 1 2 3 4; do
        echo "UPDATE shop.orders SET status = 'paid' WHERE id BETWEEN $((tx * 100 + 1)) AND $((tx * 100 + 100));"
    done
    for tx in 0 1 2; do
        echo "UPDATE shop.orders SET status = 'shipped' WHERE id BETWEEN $((tx * 100 + 1)) AND $((tx * 100 + 100));"
    done
    for tx in 0 1 2; do
        echo "DELETE FROM shop.orders WHERE id BETWEEN $((2701 + tx * 100)) AND $((2800 + tx * 100));"
    done
}

banner "writing changes: 4700 inserts, 800 updates, 300 deletes"
generate_changes | sql
echo "binlog head now: $(sql -N -B -e 'SHOW MASTER STATUS' | cut -f1,2 | tr '\t' ':')"

config="$tmp/sluice.toml"
cat >"$config" <<TOML
[source]
url = "mysql://repl@127.0.0.1:$port"
server_id = 5401
start = { file = "$binlog_file", pos = $binlog_pos }

[filter]
include = ['shop\..*']

[sink]
url = "$LAKE"

[state]
dir = "$tmp/state"

# The demo reads the changes from the empty tables on; the default "initial"
# would add a consistent snapshot of the tables as they are when sluice starts.
[snapshot]
mode = "never"
TOML
banner "sluice configuration ($config)"
cat "$config"

if [ "$SKIP_SLUICE" = 1 ]; then
    banner "SKIP_SLUICE=1: not running sluice"
else
    rm -rf "$LAKE"
    export SLUICE_SOURCE_PASSWORD=demo

    banner "sluice run --until-caught-up"
    started="$(date +%s.%N)"
    "$SLUICE" run --config "$config" --until-caught-up
    finished="$(date +%s.%N)"

    rows="$("$SLUICE" status --config "$config" --json | python3 -c '
import json, sys
status = json.load(sys.stdin)
tables = status.get("tables") or status.get("totals") or {}
total = 0
for value in tables.values():
    total += value.get("rows", 0) if isinstance(value, dict) else value
print(total)
')"
    awk -v rows="$rows" -v a="$started" -v b="$finished" 'BEGIN {
        s = b - a; printf "%d rows in %.2f s: %.0f rows/s\n", rows, s, (s > 0 ? rows / s : 0)
    }'

    banner "sluice status"
    "$SLUICE" status --config "$config"
fi

banner "source row counts (for comparison)"
sql -t -e "
SELECT 'shop.customers' AS \`table\`, COUNT(*) AS \`rows\` FROM shop.customers
UNION ALL SELECT 'shop.products', COUNT(*) FROM shop.products
UNION ALL SELECT 'shop.orders', COUNT(*) FROM shop.orders;"
echo "The lake holds one row per change: 4800 (500 + 200 + 3000 inserts, 800 updates, 300 deletes)."

banner "done"
echo "The lake is in $LAKE (manifests in $LAKE/_sluice/manifests)."
echo "Every table folder is a Delta Lake table. From $PWD, query one with Polars:"
query="import polars as pl; print(pl.scan_delta('demo-lake/shop/orders').group_by('_op').len().sort('_op').collect())"
echo "  python3 -c \"$query\""
if [ -d "$LAKE/shop/orders/_delta_log" ] && python3 -c 'import polars, deltalake' >/dev/null 2>&1; then
    python3 -c "${query//demo-lake/$LAKE}"
else
    echo "  (pip install polars deltalake to run it)"
fi
echo "or with DuckDB and its delta extension:"
echo "  duckdb -c \"select _op, count(*) from delta_scan('demo-lake/shop/orders') group by 1\""
