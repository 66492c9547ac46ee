-- The schema history store of sluice (SQLite, in `[state] dir`/schema_history.sqlite).
-- One row per version of a captured table's shape. The store is a cache of
-- the lake: every committed version also lives in the lake under
-- `_sluice/schema/<db>/<table>/v<version>-<checkpoint seq>.json` and the
-- store is rebuilt from there when the state dir is lost.
--
-- Migrations: each `-- migration N` block runs once, in order; PRAGMA
-- user_version holds the last one applied.

-- migration 1
CREATE TABLE table_versions (
    database        TEXT    NOT NULL,
    table_name      TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    -- The `_tx_seq` from which this version is in force: monotonic across
    -- binlog rotation and server failover, unlike file/pos.
    order_key       INTEGER NOT NULL,
    binlog_file     TEXT    NOT NULL,
    binlog_pos      INTEGER NOT NULL,
    gtid            TEXT,
    -- When the source committed the DDL (event header), RFC 3339.
    committed_at    TEXT    NOT NULL,
    -- The DDL statement; NULL for a bootstrap from information_schema.
    statement       TEXT,
    -- 1 when the table was dropped (or renamed away) at this version.
    dropped         INTEGER NOT NULL DEFAULT 0,
    -- JSON list: [{name, lake_name, mysql_type, arrow_type, policy, nullable, primary_key, key_position, charset, labels}].
    -- key_position (the column's 1-based place in the primary key, which
    -- current-state tables sort by) is absent or null in rows written before
    -- it was recorded: such a key sorts in table order (src/schema/mod.rs).
    -- lake_name (the column's name in the changelog files and Delta schema)
    -- is absent in rows written before lake names: loading names them by the
    -- same rule from the table's whole history (src/schema/lake_names.rs).
    -- policy is the `[[columns]]` action in force ("exclude", "hash", "mask",
    -- "truncate(N)"), absent or null for none; arrow_type is the type the
    -- files hold, the policy applied (a hashed column is Utf8).
    columns         TEXT    NOT NULL,
    -- The manifest seq of the checkpoint that makes this version durable.
    checkpoint_seq  INTEGER NOT NULL,
    -- The table's default character set, for columns added later.
    table_charset   TEXT,
    PRIMARY KEY (database, table_name, version)
);
CREATE INDEX table_versions_by_checkpoint ON table_versions (checkpoint_seq);

-- Shapes recorded by `sluice schema resync`, applied when the stream
-- reaches their position (the DDL that could not be parsed).
CREATE TABLE pending_resync (
    database        TEXT    NOT NULL,
    table_name      TEXT    NOT NULL,
    binlog_file     TEXT    NOT NULL,
    binlog_pos      INTEGER NOT NULL,
    columns         TEXT    NOT NULL,
    PRIMARY KEY (database, table_name)
);

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- migration 2
-- Any number of `schema resync` shapes per table, one per position: two
-- unreadable statements on one table before a checkpoint keep one shape
-- each. A shape stays until the checkpoint that applied it commits, so a
-- retry from an earlier checkpoint applies it again.
CREATE TABLE pending_resync_at (
    database        TEXT    NOT NULL,
    table_name      TEXT    NOT NULL,
    binlog_file     TEXT    NOT NULL,
    binlog_pos      INTEGER NOT NULL,
    columns         TEXT    NOT NULL,
    -- The table's default character set, for columns added later.
    table_charset   TEXT,
    PRIMARY KEY (database, table_name, binlog_file, binlog_pos)
);
INSERT INTO pending_resync_at (database, table_name, binlog_file, binlog_pos, columns)
    SELECT database, table_name, binlog_file, binlog_pos, columns FROM pending_resync;
DROP TABLE pending_resync;
ALTER TABLE pending_resync_at RENAME TO pending_resync;

-- migration 3
-- The UNIQUE keys of each shape (JSON list: [{name, columns, prefix, hash}],
-- in the server's key order): a table without a primary key is keyed by
-- its first NOT NULL one. NULL in rows written before: no unique keys known.
ALTER TABLE table_versions ADD COLUMN unique_keys TEXT;
ALTER TABLE pending_resync ADD COLUMN unique_keys TEXT;
