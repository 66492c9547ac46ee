"""Reads every version that the log of a Delta table of a sluice lake still
has, with independent readers (the `deltalake` package, Polars, DuckDB's delta extension, Spark's
DataFrame API on a Sail server) and prints
what each saw, as JSON, for tests/suite/delta_logs.rs; with --vacuum, first
runs a full VACUUM with `deltalake` at the default, enforced retention.

    python3 tests/delta_versions.py TABLE_DIR COLUMNS [--vacuum] [--gone-ok]

Output: {"vacuumed": [files deleted], "versions": {version: {"files":
[files of the version], "rows": {reader: [[values...]]}}}, "gone": {version:
error}}, rows sorted by _seq, values as text (tests/delta_read.py's `text`,
decimals without trailing zeros). A version a reader cannot read fails the
script; with --gone-ok, one that names a file that is not there is listed in
"gone" instead (a VACUUM at a retention of seconds may delete the files of
versions the log still has, as Delta allows).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decimal  # noqa: E402

from delta_read import Spark, extension, text  # noqa: E402


def value_text(v):
    # Readers give a DECIMAL at its scale or not ("2.50", "2.5"): compare values.
    if isinstance(v, decimal.Decimal):
        return format(v.normalize(), "f")
    return text(v)


def rows_of(dicts, columns):
    out = [[value_text(d.get(c)) for c in columns] for d in dicts]
    out.sort(key=lambda r: int(r[columns.index("_seq")]))
    return out


def operation(table_dir, version):
    """The commitInfo operation of a version (local tables only; "" for a
    version the log keeps only in its checkpoint)."""
    try:
        with open(os.path.join(table_dir, "_delta_log", f"{version:020}.json")) as f:
            for line in f:
                action = json.loads(line)
                if "commitInfo" in action:
                    return str(action["commitInfo"].get("operation", ""))
    except FileNotFoundError:
        pass
    return ""


def newest_checkpoint(table_dir):
    """The version of the table's newest checkpoint (local tables), 0 without."""
    try:
        with open(os.path.join(table_dir, "_delta_log", "_last_checkpoint")) as f:
            return int(json.load(f)["version"])
    except FileNotFoundError:
        return 0


def first_version(table_dir):
    """The oldest version the log can still build (local tables): 0, or the
    oldest checkpoint once a clean-up deleted the commits before it."""
    names = os.listdir(os.path.join(table_dir, "_delta_log"))
    if f"{0:020}.json" in names:
        return 0
    return min(int(n[:20]) for n in names if n.endswith(".checkpoint.parquet"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("columns")
    ap.add_argument("--vacuum", action="store_true")
    ap.add_argument("--gone-ok", action="store_true")
    args = ap.parse_args()
    columns = args.columns.split(",")

    import duckdb
    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    out = {"vacuumed": [], "versions": {}, "gone": {}}
    if args.vacuum:
        out["vacuumed"] = sorted(
            DeltaTable(args.uri).vacuum(
                retention_hours=None, dry_run=False, enforce_retention_duration=True, full=True
            )
        )
    latest = DeltaTable(args.uri).version()
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension('delta')}'")
    uri = args.uri.replace("'", "''")
    spark = Spark({})
    # A VACUUM by deltalake commits versions of its own: read sluice's only.
    for v in range(first_version(args.uri), latest + 1):
        if operation(args.uri, v).startswith("VACUUM"):
            continue
        try:
            dt = DeltaTable(args.uri, version=v)
            schema = [f.name for f in dt.schema().fields]
            present = [c for c in columns if c in schema]
            seen = {"files": sorted(dt.file_uris()), "rows": {}}
            cols = ", ".join('"' + c.replace('"', '""') + '"' for c in present)
            # deltalake's SQL engine: to_pyarrow_table() refuses deletion vectors.
            table = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t").read_all())
            seen["rows"]["deltalake"] = rows_of(table.to_pylist(), columns)
            frame = pl.scan_delta(args.uri, version=v).select(present).collect()
            seen["rows"]["polars"] = rows_of(frame.to_dicts(), columns)
            cur = con.execute(f"SELECT {cols} FROM delta_scan('{uri}', version := {v})")
            names = [d[0] for d in cur.description]
            seen["rows"]["duckdb"] = rows_of([dict(zip(names, r)) for r in cur.fetchall()], columns)
            # Sail 0.7.2 cannot travel to a version after 1 and before the
            # newest checkpoint ("Missing commit file: expected version 0, found
            # 1", though the file is there; a table written by deltalake does the
            # same): Spark reads the versions it can.
            if v <= 1 or v >= newest_checkpoint(args.uri):
                seen["rows"]["spark"] = rows_of(
                    [r.asDict() for r in spark.frame(args.uri, v, present).collect()], columns)
            out["versions"][v] = seen
        except Exception as e:  # noqa: BLE001 - the message says which
            message = str(e)
            missing = ("not found" in message.lower() or "no such file" in message.lower()
                       or "notfound" in message.lower())
            if not (args.gone_ok and missing):
                raise
            out["gone"][v] = message[:300]
    json.dump(out, sys.stdout)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
