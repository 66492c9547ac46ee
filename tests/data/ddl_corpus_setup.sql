-- Server-side helpers of tests/suite/ddl_corpus.rs (also used by tests/data/ddl_corpus.py
-- when it extracts the corpus, so both see the same rows and the same outcomes).
--
-- corpus_meta.after_ddl(db, step, 'a/b'): for each of the tables a, b of `db`
-- whose shape (columns, types, nullability, key, charset) changed since its last call,
-- prints its columns as `#shape` rows and inserts one row with non-null
-- values generated from the shape, so rows are decoded in every shape.
-- corpus_meta.hidden(db, t): whether table t has columns that the binlog
-- carries but information_schema does not show (implicit system-versioning
-- columns, the hash column of a long UNIQUE key) or types outside DESIGN.md
-- (INET4, INET6, UUID, and COMPRESSED columns, whose values the binlog carries compressed).
-- corpus_meta.trx_versioned(db, t): whether table t has transaction-precise
-- system versioning (ROW START of type BIGINT UNSIGNED): MariaDB logs every
-- change to such a table as a statement even with binlog_format=ROW, so its
-- rows never reach the binlog as rows (README, limits).
CREATE DATABASE corpus_meta;
CREATE TABLE corpus_meta.seen (db VARCHAR(64), tbl VARCHAR(64), sig LONGTEXT, PRIMARY KEY (db, tbl));
SET SESSION sql_mode = '';
DELIMITER //
CREATE FUNCTION corpus_meta.hidden(d VARCHAR(64), t VARCHAR(64)) RETURNS INT READS SQL DATA
BEGIN
  RETURN (SELECT COUNT(*) FROM information_schema.TABLES
          WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND TABLE_TYPE = 'SYSTEM VERSIONED')
       * (1 - (SELECT COUNT(*) FROM information_schema.COLUMNS
               WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND GENERATION_EXPRESSION = 'ROW START'))
       + (SELECT COUNT(*) FROM information_schema.STATISTICS s JOIN information_schema.TABLES tb
            USING (TABLE_SCHEMA, TABLE_NAME)
          WHERE s.TABLE_SCHEMA = d AND s.TABLE_NAME = t AND s.INDEX_TYPE = 'HASH'
            AND tb.ENGINE NOT IN ('MEMORY', 'HEAP'))
       + (SELECT COUNT(*) FROM information_schema.COLUMNS
          WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND DATA_TYPE IN ('inet4', 'inet6', 'uuid'))
       + (SELECT COUNT(*) FROM information_schema.COLUMNS
          WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND COLUMN_TYPE LIKE '%COMPRESSED%');
END//
CREATE FUNCTION corpus_meta.trx_versioned(d VARCHAR(64), t VARCHAR(64)) RETURNS INT READS SQL DATA
BEGIN
  RETURN (SELECT COUNT(*) FROM information_schema.COLUMNS
          WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND GENERATION_EXPRESSION = 'ROW START'
            AND DATA_TYPE = 'bigint');
END//
CREATE PROCEDURE corpus_meta.after_ddl(IN d VARCHAR(64), IN step INT, IN names TEXT)
BEGIN
  DECLARE t VARCHAR(64);
  DECLARE s LONGTEXT;
  DECLARE cols, vals LONGTEXT;
  DECLARE rest TEXT DEFAULT names;
  SET SESSION group_concat_max_len = 1000000;
  SET @corpus_n = IFNULL(@corpus_n, 0);
  WHILE rest <> '' DO
    SET t = SUBSTRING_INDEX(rest, '/', 1);
    SET rest = IF(LOCATE('/', rest) > 0, SUBSTRING(rest, LOCATE('/', rest) + 1), '');
    SET s = (SELECT GROUP_CONCAT(CONCAT_WS(' ', COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY,
                                           IFNULL(CHARACTER_SET_NAME, '-'))
                                 ORDER BY ORDINAL_POSITION SEPARATOR '|')
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = d AND TABLE_NAME = t);
    IF s IS NULL OR (SELECT TABLE_TYPE FROM information_schema.TABLES
                     WHERE TABLE_SCHEMA = d AND TABLE_NAME = t) NOT IN ('BASE TABLE', 'SYSTEM VERSIONED') THEN
      DELETE FROM corpus_meta.seen WHERE db = d AND tbl = t;
    ELSEIF NOT EXISTS (SELECT 1 FROM corpus_meta.seen WHERE db = d AND tbl = t AND sig = s) THEN
      REPLACE INTO corpus_meta.seen VALUES (d, t, s);
      -- The primary key from STATISTICS: COLUMN_KEY also says PRI for the first
      -- UNIQUE NOT NULL key of a table without a primary key.
      SELECT '#shape', step, c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE,
             IF(EXISTS (SELECT 1 FROM information_schema.STATISTICS s
                        WHERE s.TABLE_SCHEMA = d AND s.TABLE_NAME = t AND s.INDEX_NAME = 'PRIMARY'
                          AND s.COLUMN_NAME = c.COLUMN_NAME), 'PRI', ''),
             IFNULL(c.CHARACTER_SET_NAME, '-'),
             -- The row key: the primary key, or else that unique key.
             IF(c.COLUMN_KEY = 'PRI', 'KEY', '')
        FROM information_schema.COLUMNS c
        WHERE c.TABLE_SCHEMA = d AND c.TABLE_NAME = t ORDER BY c.ORDINAL_POSITION;
      SET @corpus_n = @corpus_n + 1;
      SELECT GROUP_CONCAT(CONCAT('`', REPLACE(COLUMN_NAME, '`', '``'), '`') ORDER BY ORDINAL_POSITION),
             GROUP_CONCAT(CASE
               WHEN DATA_TYPE IN ('tinyint', 'smallint', 'mediumint', 'int', 'bigint', 'decimal',
                                  'float', 'double') THEN '@corpus_n % 100'
               WHEN DATA_TYPE = 'bit' THEN '@corpus_n % 2'
               WHEN DATA_TYPE = 'year' THEN '2000 + @corpus_n % 100'
               WHEN DATA_TYPE = 'date' THEN '''2020-01-02'''
               WHEN DATA_TYPE IN ('datetime', 'timestamp') THEN '''2020-01-02 03:04:05'''
               WHEN DATA_TYPE = 'time' THEN '''12:34:56'''
               WHEN DATA_TYPE IN ('enum', 'set') THEN '1'
               WHEN DATA_TYPE IN ('point', 'geometry') THEN 'POINT(1, 2)'
               WHEN DATA_TYPE = 'linestring' THEN 'LINESTRING(POINT(0, 0), POINT(1, 1))'
               ELSE 'CONCAT(''v'', @corpus_n)' END ORDER BY ORDINAL_POSITION)
        INTO cols, vals
        FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = d AND TABLE_NAME = t AND IS_GENERATED = 'NEVER'
          AND EXTRA NOT LIKE '%auto_increment%'
          AND DATA_TYPE NOT IN ('polygon', 'multipoint', 'multilinestring', 'multipolygon',
                                'geometrycollection');
      SET @corpus_sql = CONCAT('INSERT IGNORE INTO `', d, '`.`', REPLACE(t, '`', '``'), '` (',
                               IFNULL(cols, ''), ') VALUES (', IFNULL(vals, ''), ')');
      BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        PREPARE corpus_stmt FROM @corpus_sql;
        EXECUTE corpus_stmt;
        DEALLOCATE PREPARE corpus_stmt;
      END;
    END IF;
  END WHILE;
END//
DELIMITER ;
SET SESSION sql_mode = DEFAULT;
