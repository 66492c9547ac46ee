"""Reads one table folder of a sluice lake as an Iceberg table with independent
readers and prints what each saw, as JSON, for tests/suite/iceberg.rs to compare
with the Delta reads of the same version.

    python3 tests/iceberg_read.py TABLE_DIR COLUMNS [--snapshot ID]
        [--readers pyiceberg,polars,duckdb,spark]
        [--catalog URI --name NAMESPACE.TABLE]
    python3 tests/iceberg_read.py --catalog URI --list

TABLE_DIR is the table's local folder; the metadata file read is the one
`metadata/version-hint.text` names. With --catalog (a SQLAlchemy URI of an
Iceberg SQL catalog named "sluice", or glue:ENDPOINT for AWS Glue with the
region and keys of the environment), pyiceberg loads the table by --name from
the catalog, and the metadata file every reader reads is the one the catalog
points at (printed as "metadata_location"). --list prints
{"tables": {namespace: [table, ...]}} of the catalog. COLUMNS as in tests/delta_read.py (null for
a column the snapshot's schema lacks). Output: {"metadata_version": N,
"current": snapshot id, "snapshots": [{"id", "delta_version", "manifest_seq"}],
"schema": [column names of the snapshot read], "manifests": how many the
snapshot's manifest list names (pyiceberg), "rows": {reader: [[values...]]}},
rows sorted.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from delta_read import Spark, extension, text  # noqa: E402


def sorted_rows(dicts, columns):
    out = [[text(d.get(c)) for c in columns] for d in dicts]
    out.sort(key=lambda r: [(x is None, x or "") for x in r])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("columns", nargs="?")
    ap.add_argument("--snapshot", type=int)
    ap.add_argument("--readers", default="pyiceberg,polars,duckdb,spark")
    ap.add_argument("--catalog")
    ap.add_argument("--name")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    catalog = None
    if args.catalog and args.catalog.startswith("glue:"):
        from pyiceberg.catalog.glue import GlueCatalog

        # glue:ENDPOINT; the region and keys come from the environment.
        catalog = GlueCatalog(
            "sluice",
            **{
                "glue.endpoint": args.catalog[len("glue:"):],
                "glue.region": os.environ["AWS_REGION"],
                "glue.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
                "glue.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
            },
        )
    elif args.catalog:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("sluice", uri=args.catalog, warehouse="file:///nonexistent")
    if args.list:
        tables = {}
        for ns in catalog.list_namespaces():
            name = ".".join(ns)
            tables[name] = sorted(t[-1] for t in catalog.list_tables(name))
        json.dump({"tables": tables}, sys.stdout)
        return
    columns = args.columns.split(",")
    readers = args.readers.split(",")
    folder = os.path.abspath(args.dir)
    by_name = None
    if catalog is not None:
        by_name = catalog.load_table(args.name)
        location = by_name.metadata_location
        metadata_file = location[len("file://"):] if location.startswith("file://") else location
        n = int(os.path.basename(metadata_file)[1:].split(".")[0])
    else:
        with open(os.path.join(folder, "metadata", "version-hint.text")) as f:
            n = int(f.read().strip())
        metadata_file = os.path.join(folder, "metadata", f"v{n}.metadata.json")
    with open(metadata_file) as f:
        md = json.load(f)
    snapshot = args.snapshot if args.snapshot is not None else md["current-snapshot-id"]
    chosen = next(s for s in md["snapshots"] if s["snapshot-id"] == snapshot)
    schema = next(s for s in md["schemas"] if s["schema-id"] == chosen["schema-id"])
    names = [f["name"] for f in schema["fields"]]
    present = [c for c in columns if c in names]
    result = {
        "metadata_version": n,
        "metadata_location": metadata_file,
        "current": md["current-snapshot-id"],
        "snapshots": [
            {
                "id": s["snapshot-id"],
                "delta_version": int(s["summary"]["sluice.delta-version"]),
                "manifest_seq": int(s["summary"].get("sluice.manifest-seq", "0")),
            }
            for s in md["snapshots"]
        ],
        "schema": names,
        "rows": {},
    }

    if "pyiceberg" in readers:
        from pyiceberg.table import StaticTable

        table = by_name if by_name is not None else StaticTable.from_metadata(metadata_file)
        arrow = table.scan(snapshot_id=snapshot, selected_fields=tuple(present)).to_arrow()
        result["rows"]["pyiceberg"] = sorted_rows(arrow.to_pylist(), columns)
        result["manifests"] = len(table.snapshot_by_id(snapshot).manifests(table.io))

    if "polars" in readers:
        import polars as pl

        frame = pl.scan_iceberg(metadata_file, snapshot_id=snapshot).select(present).collect()
        result["rows"]["polars"] = sorted_rows(frame.to_arrow().to_pylist(), columns)

    if "duckdb" in readers:
        import duckdb

        con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                     "autoload_known_extensions": False})
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"LOAD '{extension('avro')}'")
        con.execute(f"LOAD '{extension('iceberg')}'")
        quoted = ", ".join('"' + c.replace('"', '""') + '"' for c in present)
        path = metadata_file.replace("'", "''")
        arrow = con.execute(
            f"SELECT {quoted} FROM iceberg_scan('{path}', snapshot_from_id => {snapshot})"
        ).to_arrow_table()
        result["rows"]["duckdb"] = sorted_rows(arrow.to_pylist(), columns)

    if "spark" in readers:
        spark = Spark({})
        frame = (
            spark.session.read.format("iceberg")
            .option("snapshot-id", snapshot)
            .load("file://" + folder)
            .select(*[f"`{c.replace('`', '``')}`" for c in present])
        )
        result["rows"]["spark"] = sorted_rows([r.asDict() for r in frame.collect()], columns)

    json.dump(result, sys.stdout)
    sys.stdout.flush()
    # Complete: leave without the interpreter's teardown, where the Spark
    # Connect server's threads keep the process alive (as in delta_read.py).
    os._exit(0)


if __name__ == "__main__":
    main()
