"""One sample of a changelog table for the soak benchmark
(tests/suite/compaction.rs `bench_soak`): its live files (the `deltalake`
package's list), the size of its newest checkpoint, the files of its
`_delta_log/`, and a DuckDB `count(*)` over `delta_scan` with its time.

    python3 benches/soak_sample.py TABLE_DIR

Prints one JSON object.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from delta_read import extension  # noqa: E402


def main():
    table = sys.argv[1]
    import duckdb
    from deltalake import DeltaTable

    log = os.path.join(table, "_delta_log")
    out = {"live_files": len(DeltaTable(table).file_uris()), "log_files": len(os.listdir(log))}
    try:
        with open(os.path.join(log, "_last_checkpoint")) as f:
            v = json.load(f)["version"]
        out["checkpoint_bytes"] = os.path.getsize(os.path.join(log, f"{v:020}.checkpoint.parquet"))
    except FileNotFoundError:
        out["checkpoint_bytes"] = 0
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension('delta')}'")
    uri = table.replace("'", "''")
    started = time.monotonic()
    out["count"] = con.execute(f"SELECT count(*) FROM delta_scan('{uri}')").fetchone()[0]
    out["count_ms"] = round((time.monotonic() - started) * 1000, 1)
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
