#!/bin/sh
# Starts a private mariadbd in DIR (socket DIR/sock, no TCP) with the binlog
# settings of the test harness; used by tests/data/ddl_corpus.py.
# usage: scripts/ddl-corpus-server.sh DIR
set -e
D=$1
rm -rf "$D"; mkdir -p "$D/tmp"
USER_ARG=""
[ "$(id -u)" = 0 ] && USER_ARG="--user=root"
mariadb-install-db --no-defaults --datadir="$D/data" --tmpdir="$D/tmp" \
  --auth-root-authentication-method=normal --skip-test-db $USER_ARG >/dev/null 2>&1
mariadbd --no-defaults --datadir="$D/data" --socket="$D/sock" --tmpdir="$D/tmp" --skip-networking \
  --log-bin=binlog --server-id=1 --binlog-format=ROW --binlog-row-image=FULL \
  --log-error="$D/err.log" --pid-file="$D/pid" --innodb-buffer-pool-size=64M \
  --default-time-zone=+00:00 --character-set-server=utf8mb4 \
  --collation-server=utf8mb4_general_ci --innodb-flush-log-at-trx-commit=0 --sync-binlog=0 \
  --innodb-doublewrite=0 $USER_ARG >/dev/null 2>&1 &
for _ in $(seq 1 150); do
  if [ -S "$D/sock" ] && mariadb --no-defaults -uroot --socket="$D/sock" -e 'SELECT 1' >/dev/null 2>&1; then
    exit 0
  fi
  sleep 0.2
done
echo "mariadbd did not start; see $D/err.log" >&2
exit 1
