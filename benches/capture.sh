#!/usr/bin/env bash
# Captures a real MariaDB binlog for the criterion micro-benchmarks
# (benches/decode.rs): one table per type family plus the e2e benchmark's
# wide table, written by a throwaway mariadbd and copied into benches/data/
# (gitignored; never committed).
#
#   benches/capture.sh && cargo bench --bench decode
#
# Writes benches/data/binlog.NNNNNN (the server's binlog files, as they are on
# disk) and benches/data/columns.tsv (information_schema.COLUMNS of the
# captured tables, which the benchmark turns into sluice's table schemas).
# CAPTURE_ROWS (default 50000) sets the rows per table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
# shellcheck source=benches/lib.sh
source benches/lib.sh

ROWS="${CAPTURE_ROWS:-50000}"
if ! [[ "$ROWS" =~ ^[0-9]+$ ]] || [ "$ROWS" -lt 2 ]; then
    echo "error: CAPTURE_ROWS must be an integer >= 2" >&2
    exit 2
fi
OUT="benches/data"

ensure_mariadb
command -v python3 >/dev/null 2>&1 || apt_install python3

tmp="$(mktemp -d -t sluice-capture.XXXXXX)"
cleanup() {
    local rc=$?
    set +e
    server_stop
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

server_start "$tmp"

banner "writing $ROWS rows into each of bench.ints, decimals, temporal, strings, json, wide"
sql <<SQL
SET time_zone = '+00:00';
CREATE DATABASE bench;
USE bench;
CREATE TABLE ints (
    id INT PRIMARY KEY, t TINYINT, s SMALLINT, m MEDIUMINT, i INT, b BIGINT,
    iu INT UNSIGNED, bu BIGINT UNSIGNED
);
CREATE TABLE decimals (
    id INT PRIMARY KEY, d10 DECIMAL(10,0), d12 DECIMAL(12,2), d20 DECIMAL(20,6),
    d38 DECIMAL(38,10), d65 DECIMAL(65,30)
);
CREATE TABLE temporal (
    id INT PRIMARY KEY, d DATE, dt0 DATETIME, dt6 DATETIME(6), ts0 TIMESTAMP NULL,
    ts3 TIMESTAMP(3) NULL, tm6 TIME(6), y YEAR
);
CREATE TABLE strings (
    id INT PRIMARY KEY, c CHAR(16), v VARCHAR(64), v2 VARCHAR(300), txt TEXT,
    l1 VARCHAR(64) CHARACTER SET latin1, vb VARBINARY(32), e ENUM('new','paid','shipped','cancelled')
);
CREATE TABLE json (id INT PRIMARY KEY, doc JSON);
CREATE TABLE wide (
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
);
FLUSH BINARY LOGS;

INSERT INTO ints SELECT n, n % 256 - 128, n % 65536 - 32768, n * 37 % 16777216 - 8388608,
    n * 2654435 % 4294967296 - 2147483648, n * 1000003 - 500000000000,
    n * 2654435 % 4294967296, CAST(CONV(LEFT(MD5(n), 16), 16, 10) AS UNSIGNED)
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
INSERT INTO decimals SELECT n, n * 7919, (n * 7919 % 100000000) / 100, n * 1.000123,
    n * 12345.6789012345, n * 3.14159265358979323846264338327950288
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
INSERT INTO temporal SELECT n, DATE'2000-01-01' + INTERVAL n % 9000 DAY,
    TIMESTAMP'2024-01-01 00:00:00' + INTERVAL n SECOND,
    TIMESTAMP'2024-01-01 00:00:00' + INTERVAL n SECOND + INTERVAL (n * 7 % 1000000) MICROSECOND,
    FROM_UNIXTIME(1700000000 + n), FROM_UNIXTIME(1700000000 + n + (n % 1000) / 1000),
    SEC_TO_TIME(n % 3000000 - 1500000) + INTERVAL (n % 1000000) MICROSECOND, 1901 + n % 255
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
INSERT INTO strings SELECT n, LEFT(MD5(n), 1 + n % 16), CONCAT('customer-', n, '-', LEFT(SHA1(n), 16)),
    REPEAT(MD5(n), 1 + n % 9), CONCAT(REPEAT(MD5(n), 6), LEFT(SHA1(n), 8)),
    CONCAT('Größe ', n, ' café €'), UNHEX(SHA1(n)), ELT(1 + n % 4, 'new', 'paid', 'shipped', 'cancelled')
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
INSERT INTO json SELECT n, JSON_OBJECT('id', n, 'sku', CONCAT('SKU-', n % 5000), 'qty', n % 17,
    'price', n * 0.25, 'tags', JSON_ARRAY('red', 'blue', n % 3), 'ok', n % 2 = 0,
    'address', JSON_OBJECT('city', CONCAT('City ', n % 100), 'zip', LPAD(n % 100000, 5, '0')))
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
INSERT INTO wide SELECT n,
       CAST(CONV(LEFT(MD5(n), 16), 16, 10) AS UNSIGNED),
       (n * 7919 % 100000000) / 100,
       CONCAT('customer-', n, '-', LEFT(SHA1(n), 16)),
       TIMESTAMP'2024-01-01 00:00:00' + INTERVAL n SECOND + INTERVAL (n * 7 % 1000000) MICROSECOND,
       FROM_UNIXTIME(1700000000 + n),
       SQRT(n) * 1000.125,
       CONCAT(REPEAT(MD5(n), 6), LEFT(SHA1(n), 8)),
       JSON_OBJECT('id', n, 'sku', CONCAT('SKU-', n % 5000), 'qty', n % 17,
                   'tags', JSON_ARRAY('red', 'blue', n % 3)),
       ELT(1 + n % 4, 'new', 'paid', 'shipped', 'cancelled')
FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_$ROWS) s;
UPDATE wide SET amount = amount + 1.25, score = score * 1.5, status = 'returned',
    seen = seen + INTERVAL 1 HOUR, big = big DIV 3;
DELETE FROM wide WHERE id % 2 = 0;
SQL

rm -rf "$OUT"
mkdir -p "$OUT"
# FLUSH BINARY LOGS above put the DDL in the first file and the rows in the
# second; both are kept, so that the offline replay benchmark learns the
# tables' shapes from the CREATE TABLE statements as `sluice run` does.
sql -N -B -e 'SHOW BINARY LOGS' | cut -f1 >"$tmp/files"
sql -e 'FLUSH BINARY LOGS'
while read -r f; do
    cp "$tmp/data/$f" "$OUT/$f"
done <"$tmp/files"
sql -N -B -e "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE,
    c.COLUMN_KEY, IFNULL(c.CHARACTER_SET_NAME, '')
    FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = 'bench'
    ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION" >"$OUT/columns.tsv"
banner "captured"
ls -l "$OUT"
