"""Reads one Delta table of a sluice lake with independent readers and prints
what each saw, as JSON, for tests/delta.rs to compare with the manifests.

    python3 tests/delta_read.py TABLE_URI COLUMNS [--version N]
        [--storage JSON] [--readers deltalake,polars,duckdb,spark]

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
import time


def text(v):
    if v is None:
        return None
    if isinstance(v, datetime.datetime):
        # As tests/common/mod.rs renders timestamps (mysql_text).
        return v.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, bytearray):
        # Spark gives binary values as bytearray, the others as bytes.
        return str(bytes(v))
    if hasattr(v, "asDict"):
        # A Spark Row (a struct such as _before): as the others give it, a dict.
        return str({k: plain(x) for k, x in v.asDict().items()})
    if isinstance(v, list):
        return str([plain(x) for x in v])
    return str(v)


def plain(v):
    """A Spark value nested in a struct or list as pyarrow gives it."""
    if isinstance(v, bytearray):
        return bytes(v)
    if hasattr(v, "asDict"):
        return {k: plain(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


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


class Spark:
    """Spark's DataFrame API over Delta tables: a Sail Spark Connect server
    (PyPI `pysail`) in this process, reached with `pyspark-client`."""

    def __init__(self, storage):
        # pyspark makes timestamps local to this process: UTC, as the others.
        os.environ["TZ"] = "UTC"
        time.tzset()
        # Sail's object store reads the AWS variables of its process.
        for key, value in (storage or {}).items():
            os.environ[key] = str(value)
        if "AWS_ENDPOINT_URL" in (storage or {}):
            os.environ.setdefault("AWS_ALLOW_HTTP", "true")
        from pysail.spark import SparkConnectServer
        from pyspark.sql import SparkSession

        self.server = SparkConnectServer(ip="127.0.0.1", port=0)
        self.server.start(background=True)
        _, port = self.server.listening_address
        self.session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        # Timestamps with a zone come back in the session's zone: UTC, as the others.
        self.session.conf.set("spark.sql.session.timeZone", "UTC")

    def frame(self, uri, version, present):
        reader = self.session.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(uri).select(*[f"`{c.replace('`', '``')}`" for c in present])

    def rows(self, uri, version, present, columns):
        return rows_of([r.asDict() for r in self.frame(uri, version, present).collect()], columns)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("columns")
    ap.add_argument("--version", type=int)
    ap.add_argument("--storage", default="{}")
    ap.add_argument("--readers", default="deltalake,polars,duckdb,spark")
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
        import pyarrow

        # Through its SQL engine (delta-kernel): to_pyarrow_table() refuses
        # tables with deletion vectors, QueryBuilder reads them.
        from deltalake import QueryBuilder

        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in present)
        table = pyarrow.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t").read_all())
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

    if "spark" in readers:
        result["rows"]["spark"] = Spark(storage).rows(args.uri, args.version, present, columns)

    json.dump(result, sys.stdout)
    sys.stdout.flush()
    # The result is complete: leave without the interpreter's teardown, where
    # a reader's native threads once aborted the process ("terminate called
    # without an active exception") after everything had been read.
    os._exit(0)


if __name__ == "__main__":
    main()
