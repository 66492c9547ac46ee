"""Reads one Delta table of a sluice lake with independent readers and prints
what each saw, as JSON, for tests/delta.rs to compare with the manifests.

    python3 tests/delta_read.py TABLE_URI COLUMNS [--version N]
        [--storage JSON] [--readers deltalake,polars,duckdb]

COLUMNS is a comma-separated list; every value is printed as text (None for
null, and for a column the version read does not have), integers in decimal. Output: {"version": latest version (deltalake),
"files": file names of the version read, "rows": {reader: [[values...]]}},
rows sorted by _seq.
"""

import argparse
import datetime
import json
import os
import sys


def text(v):
    if v is None:
        return None
    if isinstance(v, datetime.datetime):
        # As tests/common/mod.rs renders timestamps (mysql_text).
        return v.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def rows_of(dicts, columns):
    out = [[text(d.get(c)) for c in columns] for d in dicts]
    out.sort(key=lambda r: int(r[columns.index("_seq")]))
    return out


def extension(name):
    """The path of a DuckDB extension from its PyPI wheel (duckdb-extension-NAME),
    which loads offline when its version is duckdb's."""
    import importlib

    import duckdb

    module = importlib.import_module("duckdb_extension_" + name)
    base = os.path.dirname(module.__file__)
    path = os.path.join(base, "extensions", "v" + duckdb.__version__, name + ".duckdb_extension")
    if not os.path.exists(path):
        sys.exit(f"no {name} extension for duckdb {duckdb.__version__} at {path}: "
                 f"duckdb-extension-{name} must have duckdb's version")
    return path


def s3_secret(con, storage):
    """An S3 secret for DuckDB from the object_store-style options."""
    con.execute(f"LOAD '{extension('httpfs')}'")
    endpoint = storage["AWS_ENDPOINT_URL"]
    secure = endpoint.startswith("https://")
    host = endpoint.split("://", 1)[1].rstrip("/")
    con.execute(
        "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
        "URL_STYLE 'path', USE_SSL ?)".replace("?", "{}").format(
            *["'" + str(v).replace("'", "''") + "'" for v in (
                storage["AWS_ACCESS_KEY_ID"], storage["AWS_SECRET_ACCESS_KEY"],
                storage.get("AWS_REGION", "us-east-1"), host)],
            "true" if secure else "false"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("columns")
    ap.add_argument("--version", type=int)
    ap.add_argument("--storage", default="{}")
    ap.add_argument("--readers", default="deltalake,polars,duckdb")
    args = ap.parse_args()
    columns = args.columns.split(",")
    storage = json.loads(args.storage)
    readers = args.readers.split(",")
    result = {"rows": {}}

    from deltalake import DeltaTable

    latest = DeltaTable(args.uri, storage_options=storage or None)
    result["latest_version"] = latest.version()
    dt = DeltaTable(args.uri, version=args.version, storage_options=storage or None)
    result["version"] = dt.version()
    result["files"] = sorted(os.path.basename(u) for u in dt.file_uris())
    result["schema"] = [f.name for f in dt.schema().fields]
    proto = dt.protocol()
    result["protocol"] = [proto.min_reader_version, proto.min_writer_version]

    # Columns the version read does not have yet (added by a later DDL) are
    # null in every row, as the manifests' files say.
    present = [c for c in columns if c in result["schema"]]

    if "deltalake" in readers:
        import pyarrow  # noqa: F401  (the deltalake package reads through pyarrow)

        table = dt.to_pyarrow_table(columns=present)
        result["rows"]["deltalake"] = rows_of(table.to_pylist(), columns)

    if "polars" in readers:
        import polars as pl

        frame = pl.scan_delta(args.uri, version=args.version,
                              storage_options=storage or None).select(present).collect()
        result["rows"]["polars"] = rows_of(frame.to_dicts(), columns)

    if "duckdb" in readers:
        import duckdb

        con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                     "autoload_known_extensions": False})
        con.execute(f"LOAD '{extension('delta')}'")
        if args.uri.startswith("s3://"):
            s3_secret(con, storage)
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in present)
        version = "" if args.version is None else f", version := {args.version}"
        uri = args.uri.replace("'", "''")
        cur = con.execute(f"SELECT {cols} FROM delta_scan('{uri}'{version})")
        names = [d[0] for d in cur.description]
        result["rows"]["duckdb"] = rows_of([dict(zip(names, r)) for r in cur.fetchall()], columns)

    json.dump(result, sys.stdout)
    sys.stdout.flush()
    # The result is complete: leave without the interpreter's teardown, where
    # a reader's native threads once aborted the process ("terminate called
    # without an active exception") after everything had been read.
    os._exit(0)


if __name__ == "__main__":
    main()
