#!/usr/bin/env python3
"""Regenerates tests/data/ddl_corpus.jsonl, the statements of tests/suite/ddl_corpus.rs.

    python3 tests/data/ddl_corpus.py MYSQL_TEST_DIR [OUT]

MYSQL_TEST_DIR is the mysql-test folder of Debian's mariadb-test-data package of
the installed server version (`apt-get download mariadb-test-data`,
`dpkg-deb -x mariadb-test-data_*.deb x`, then x/usr/share/mysql/mysql-test).

The corpus is tests/data/ddl_forms.sql (hand-written forms, database c0)
followed by the table-shape statements (CREATE/ALTER/RENAME/DROP/TRUNCATE
TABLE) of MariaDB's own tests, each test file in a database of its own (c1,
c2, ...). They are run in order on a fresh private mariadbd, with
corpus_meta.after_ddl (tests/data/ddl_corpus_setup.sql) after each one exactly
as the test does; a statement is kept when it succeeds, leaves no table
with columns that information_schema does not show (see corpus_meta.hidden)
and no table with transaction-precise system versioning, whose changes
MariaDB logs as statements even with binlog_format=ROW (see
corpus_meta.trx_versioned; the rows inserted into such a table would stop
sluice, as README says). The runs repeat until every kept statement
succeeds. At the end it prints how many statements were left out, per reason.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [
    "main/alter_table.test",
    "main/alter_table_combinations.test",
    "main/alter_table_errors.test",
    "main/alter_table_online.test",
    "main/alter_table_trans.test",
    "main/alter_table_autoinc-5574.test",
    "main/create.test",
    "main/create_or_replace.test",
    "main/create_utf8.test",
    "main/create_drop_index.test",
    "main/rename.test",
    "main/invisible_field.test",
    "main/check_constraint.test",
    "suite/innodb/t/instant_alter.test",
    "suite/innodb/t/instant_alter_bugs.test",
    "suite/innodb/t/instant_alter_charset.test",
    "suite/innodb/t/instant_alter_extend.test",
    "suite/innodb/t/instant_alter_rollback.test",
    "suite/innodb/t/instant_alter_import.test",
    "suite/innodb/t/instant_alter_index_rename.test",
    "suite/innodb/t/instant_alter_inject.test",
    "suite/innodb/t/instant_alter_limit.test",
    "suite/innodb/t/instant_alter_purge.test",
    "suite/versioning/t/alter.test",
    "suite/versioning/t/create.test",
    "suite/versioning/t/rpl.test",
    "suite/versioning/t/truncate.test",
    "suite/versioning/t/partition.test",
    "suite/versioning/t/select.test",
    "suite/versioning/t/insert.test",
    "suite/versioning/t/update.test",
    "suite/versioning/t/delete.test",
    "suite/versioning/t/trx_id.test",
    "suite/versioning/t/online.test",
    "suite/versioning/t/foreign.test",
    "suite/versioning/t/commit_id.test",
]
# mysqltest commands written without the `--` prefix.
MYSQLTEST_COMMANDS = {
    "let", "eval", "source", "if", "while", "echo", "connect", "connection",
    "disconnect", "error", "send", "reap", "sleep", "real_sleep", "replace_result",
    "replace_column", "replace_regex", "query_vertical", "vertical_results",
    "horizontal_results", "exit", "die", "skip", "sync_slave_with_master",
    "save_master_pos", "sync_with_master", "perl", "end", "inc", "dec",
    "remove_file", "write_file", "append_file", "cat_file", "copy_file", "move_file",
    "file_exists", "mkdir", "rmdir", "list_files", "exec", "system", "shutdown_server",
    "wait_for_slave_to_stop", "require", "result_format", "character_set", "sorted_result",
    "lowercase_result", "send_eval", "query_get_value", "start_timer", "end_timer",
}
SHAPE = re.compile(
    r"^\s*(/\*.*?\*/\s*)?("
    r"CREATE\s+(OR\s+REPLACE\s+)?TABLE\b|ALTER\s+(ONLINE\s+)?(IGNORE\s+)?TABLE\b|"
    r"RENAME\s+TABLES?\b|DROP\s+TABLES?\b|TRUNCATE\b)",
    re.I | re.S,
)
EXCLUDE = [
    # CREATE ... SELECT does not state its shape: it comes from the rows' TABLE_MAP
    # with binlog_row_metadata=FULL (README), not from the statement.
    (re.compile(r"\bSELECT\b", re.I), "create-select"),
    (re.compile(r"\$|@"), "mysqltest variable"),
    (re.compile(r"\bSEQUENCE\b", re.I), "sequence"),
    (re.compile(r"\b(mysql|test|mysqltest\w*|information_schema|performance_schema)\s*\.", re.I),
     "another database"),
    (re.compile(r"\bDATA\s+DIRECTORY|INDEX\s+DIRECTORY", re.I), "directories"),
    (re.compile(r"\bTEMPORARY\b", re.I), "temporary"),
]


def statements(path):
    """Yields (line, sql) of the SQL statements of a mysqltest file."""
    delimiter = ";"
    buf, start = [], None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if not buf:
                if not s or s.startswith("#") or s.startswith("--"):
                    continue
                m = re.match(r"delimiter\s+(\S+)", s, re.I)
                if m:
                    d = m.group(1)
                    delimiter = d[: -len(delimiter)] if d.endswith(delimiter) and d != delimiter else d
                    continue
                if s in ("{", "}") or s.startswith("}"):
                    continue
                start = n
            elif s.startswith("#") or s.startswith("--"):
                continue
            buf.append(line.rstrip("\n"))
            if s.endswith(delimiter):
                sql = " ".join(x.strip() for x in buf)
                sql = sql[: len(sql) - len(delimiter)].strip()
                buf = []
                first = re.split(r"[\s(;]", sql, 1)[0].lower()
                if first not in MYSQLTEST_COMMANDS:
                    yield start, sql


NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?"


def unquote(name):
    """`a`.`b` or a.b -> b (the corpus keeps statements of their own database)."""
    parts = re.findall(r"`((?:[^`]|``)+)`|([\w$]+)", name)
    last = parts[-1]
    return (last[0].replace("``", "`") if last[0] else last[1])


def tables_of(sql):
    """The tables a statement names, in order: the ones whose shape the test checks."""
    body = re.sub(r"/\*M?!\d*|\*/", " ", sql)
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
    m = re.match(r"\s*(CREATE\s+(?:OR\s+REPLACE\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?|"
                 r"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE(?:\s+IF\s+EXISTS)?|"
                 r"TRUNCATE(?:\s+TABLE)?)\s+(" + NAME + ")", body, re.I)
    if m:
        names = [unquote(m.group(2))]
        if m.group(1).upper().startswith("ALTER"):
            for r in re.finditer(r"(?:^|,)\s*RENAME\s+(?:TO\s+|AS\s+)?(?!(?:COLUMN|INDEX|KEY)\b)(" + NAME + ")",
                                 body[m.end():], re.I):
                names.append(unquote(r.group(1)))
        return names
    m = re.match(r"\s*(RENAME|DROP)\s+TABLES?(?:\s+IF\s+EXISTS)?\s+(.*)$", body, re.I | re.S)
    if m:
        return [unquote(n) for n in re.findall(NAME, re.sub(r"\bTO\b|\b(RESTRICT|CASCADE)\b", ",", m.group(2), flags=re.I))]
    return []


def candidates(test_dir, excluded):
    """The statements to try, in order; counts the ones left out in `excluded`."""
    out = []
    forms = os.path.join(HERE, "ddl_forms.sql")
    for line, sql in statements(forms):
        out.append({"db": "c0", "src": "tests/data/ddl_forms.sql:%d" % line, "sql": sql,
                    "tables": tables_of(sql)})
    for i, rel in enumerate(SOURCES, 1):
        path = os.path.join(test_dir, rel)
        if not os.path.exists(path):
            print("missing %s" % rel, file=sys.stderr)
            continue
        picked = []
        for line, sql in statements(path):
            if not SHAPE.match(sql):
                continue
            reason = next((why for r, why in EXCLUDE if r.search(sql)), None)
            if reason:
                excluded[reason] = excluded.get(reason, 0) + 1
                continue
            tables = tables_of(sql)
            if not tables:
                print("no table name in %s:%d %s" % (rel, line, sql[:80]), file=sys.stderr)
                excluded["no table name"] = excluded.get("no table name", 0) + 1
                continue
            picked.append({"db": "c%d" % i, "src": "mysql-test/%s:%d" % (rel, line), "sql": sql,
                           "tables": tables})
        out.extend(picked)
    return out


def start_server(d):
    subprocess.run(["sh", os.path.join(HERE, "..", "..", "scripts", "ddl-corpus-server.sh"), d],
                   check=True)


def sql_text(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def run_pass(entries):
    """Runs the entries on a fresh server; returns the indexes to drop and why."""
    d = tempfile.mkdtemp(prefix="ddl-corpus-")
    start_server(d)
    client = ["mariadb", "--no-defaults", "-uroot", "--socket=%s/sock" % d,
              "--default-character-set=utf8mb4", "-N", "-B", "--force"]
    try:
        setup = open(os.path.join(HERE, "ddl_corpus_setup.sql")).read()
        dbs = sorted({e["db"] for e in entries}, key=lambda x: int(x[1:]))
        setup += "".join("CREATE DATABASE %s;\n" % db for db in dbs)
        subprocess.run(client, input=setup.encode(), check=True)
        lines, line_of = [], {}
        for i, e in enumerate(entries):
            lines.append("USE %s;" % e["db"])
            line_of[len(lines) + 1] = i
            lines.append(e["sql"] + ";")
            hidden = " + ".join("corpus_meta.hidden('%s', %s)" % (e["db"], sql_text(t))
                                for t in e["tables"]) or "0"
            trx = " + ".join("corpus_meta.trx_versioned('%s', %s)" % (e["db"], sql_text(t))
                             for t in e["tables"]) or "0"
            lines.append("SELECT '#hidden', %d, %s, %s;" % (i, hidden, trx))
            lines.append("CALL corpus_meta.after_ddl('%s', %d, %s);" % (
                e["db"], i, sql_text("/".join(e["tables"]))))
        p = subprocess.run(client, input="\n".join(lines).encode(), capture_output=True)
        drop = {}
        for m in re.finditer(r"^ERROR \d+ \(\w+\) at line (\d+)", p.stderr.decode(errors="replace"), re.M):
            n = int(m.group(1))
            if n in line_of:
                drop[line_of[n]] = "error"
            else:
                print("error outside a statement at line %d" % n, file=sys.stderr)
        for out in p.stdout.decode(errors="replace").splitlines():
            f = out.split("\t")
            if f[0] == "#hidden" and int(f[1]) not in drop:
                if int(f[2]) > 0:
                    drop[int(f[1])] = "hidden"
                elif int(f[3]) > 0:
                    drop[int(f[1])] = "trx-versioned"
        return drop
    finally:
        subprocess.run(["mariadb-admin", "--no-defaults", "-uroot", "--socket=%s/sock" % d,
                        "shutdown"], capture_output=True)
        subprocess.run(["rm", "-rf", d])


def main():
    test_dir = sys.argv[1]
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "ddl_corpus.jsonl")
    excluded = {}
    entries = candidates(test_dir, excluded)
    print("%d candidate statements" % len(entries), file=sys.stderr)
    for n in range(12):
        t0 = time.time()
        drop = run_pass(entries)
        print("pass %d: %d statements, %d dropped (%d hidden, %d trx-versioned) in %.1fs" % (
            n + 1, len(entries), len(drop), sum(1 for v in drop.values() if v == "hidden"),
            sum(1 for v in drop.values() if v == "trx-versioned"), time.time() - t0),
            file=sys.stderr)
        for i in sorted(drop):
            if entries[i]["db"] == "c0":
                print("  hand-written form dropped (%s): %s" % (drop[i], entries[i]["sql"]),
                      file=sys.stderr)
        if not drop:
            break
        for why in drop.values():
            why = {
                "error": "fails on the server (in order, after the others left out)",
                "hidden": "leaves a table with hidden columns (corpus_meta.hidden)",
                "trx-versioned": "leaves a table with transaction-precise system versioning",
            }[why]
            excluded[why] = excluded.get(why, 0) + 1
        entries = [e for i, e in enumerate(entries) if i not in drop]
    with open(out_path, "w") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    print("%d statements written to %s" % (len(entries), out_path), file=sys.stderr)
    print("left out:", file=sys.stderr)
    for why, n in sorted(excluded.items(), key=lambda x: -x[1]):
        print("  %5d  %s" % (n, why), file=sys.stderr)


if __name__ == "__main__":
    main()
