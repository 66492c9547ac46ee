# Shared by benches/e2e.sh, benches/fold_only.sh, benches/whole_run.sh and benches/capture.sh; meant to be sourced after
# scripts/common.sh (for banner, as_root, ensure_mariadb / MARIADBD).
#
# A throwaway mariadbd: its own data directory, socket and a free port on
# 127.0.0.1. It never touches a MariaDB service already on the machine.

SERVER_PID=""

# Installs Debian packages by name.
apt_install() {
    banner "installing $* (apt-get)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

# A free TCP port on 127.0.0.1, picked by the kernel.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# server_start DIR: creates DIR/data and starts mariadbd with the binlog on
# (ROW, FULL, CRC32 checksums, server-id 1). Sets SOCK, PORT and SERVER_PID.
# Tables default to utf8mb4, as on a packaged MariaDB or MySQL 8 (with
# --no-defaults the server would default to latin1). Durability is relaxed
# (flush_log_at_trx_commit=2, sync_binlog=0, no doublewrite) so workloads are
# written quickly; the binlog's content is the same.
server_start() {
    local dir="$1"
    local user_args=()
    if [ "$(id -u)" -eq 0 ]; then
        user_args=(--user=root)
    fi
    SOCK="$dir/mysqld.sock"
    if [ -d "$dir/data" ]; then
        # A data directory kept from an earlier run (KEEP=1): started again.
        banner "reusing the MariaDB data directory in $dir/data"
    else
        banner "creating a MariaDB data directory in $dir/data"
        mariadb-install-db --no-defaults "${user_args[@]}" --datadir="$dir/data" \
            --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 || {
            cat "$dir/install.log" >&2
            return 1
        }
    fi
    PORT="$(free_port)"
    banner "starting mariadbd on 127.0.0.1:$PORT (socket $SOCK)"
    "$MARIADBD" --no-defaults "${user_args[@]}" \
        --datadir="$dir/data" \
        --tmpdir="$dir" \
        --socket="$SOCK" \
        --port="$PORT" \
        --bind-address=127.0.0.1 \
        --skip-networking=0 \
        --skip-name-resolve \
        --log-bin="$dir/data/binlog" \
        --server-id=1 \
        --binlog-format=ROW \
        --binlog-row-image=FULL \
        --binlog-checksum=CRC32 \
        --character-set-server=utf8mb4 \
        --collation-server=utf8mb4_general_ci \
        --innodb-buffer-pool-size=1G \
        --innodb-log-file-size=1G \
        --innodb-flush-log-at-trx-commit=2 \
        --innodb-doublewrite=0 \
        --sync-binlog=0 \
        --max-connections=50 \
        --pid-file="$dir/mysqld.pid" \
        --log-error="$dir/mysqld.err" >"$dir/mysqld.out" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        mariadb-admin --no-defaults --socket="$SOCK" -uroot ping >/dev/null 2>&1 && return 0
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "error: mariadbd exited during start-up; its output:" >&2
            cat "$dir/mysqld.out" "$dir/mysqld.err" >&2 || true
            return 1
        fi
        sleep 0.1
    done
    echo "error: mariadbd did not answer within 60s; its log:" >&2
    cat "$dir/mysqld.err" >&2 || true
    return 1
}

# Stops the server started by server_start (by its pid), if it runs.
server_stop() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "stopping the benchmark MariaDB (pid $SERVER_PID)"
        mariadb-admin --no-defaults --socket="$SOCK" -uroot shutdown >/dev/null 2>&1 \
            || kill "$SERVER_PID" 2>/dev/null
        for _ in $(seq 1 600); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -9 "$SERVER_PID" 2>/dev/null
        fi
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}

# SQL as root over the socket.
sql() {
    mariadb --no-defaults --socket="$SOCK" -uroot "$@"
}

# bench_config DIR USER PORT START_FILE START_POS: writes DIR/sluice.toml for
# the e2e workload's tables (sbtest.*, bench.*) from that binlog position, no
# snapshot, sluice's defaults otherwise; callers append their own sections.
bench_config() {
    mkdir -p "$1"
    cat >"$1/sluice.toml" <<TOML
[source]
url = "mysql://$2@127.0.0.1:$3"
server_id = 5401
start = { file = "$4", pos = $5 }

[filter]
include = ['sbtest\..*', 'bench\..*']

[sink]
url = "$1/lake"

[state]
dir = "$1/state"

# The binlog from the start position is what is measured, not a snapshot.
[snapshot]
mode = "never"
TOML
}

# kept_server KEPT_DIR: checks the directory `KEEP=1 benches/e2e.sh` kept and
# sets START_FILE and START_POS from START (file:pos), by default the start
# position of benches/results/meta.json (the last e2e run's).
kept_server() {
    [ -d "$1/data" ] || { echo "error: $1/data not found (run benches/e2e.sh with KEEP=1)" >&2; exit 1; }
    START="${START:-$(python3 -c 'import json; print(json.load(open("benches/results/meta.json"))["start"])')}"
    START_FILE="${START%%:*}"
    START_POS="${START##*:}"
}
