"""Runs the maintenance a user may run with the `deltalake` package on
sluice's Delta tables while sluice writes them (tests/suite/other_writers.rs):
OPTIMIZE (compact, Z-order), VACUUM with no retention, checkpoints and
table properties, at seeded random moments.

    python3 tests/delta_maintenance.py SEED SECONDS TABLE_DIR...

SLUICE_TEST_RETENTION (default "interval 30 days") is the log and file
retention the `properties` operation sets.

Prints {"done": [[table, operation]...], "failed": [[table, operation, error]...]}
as JSON. A commit that loses to a concurrent one is an answer delta-rs may
give; any other error fails the script.
"""

import json
import os
import random
import sys
import time

from deltalake import DeltaTable


def main():
    seed, seconds, tables = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    rng = random.Random(seed)
    done, failed = [], []
    # `compact_vacuum`: an OPTIMIZE and at once a VACUUM, so that files a
    # fold has not read yet are gone before it reads them.
    ops = ["compact", "z_order", "vacuum", "compact_vacuum", "checkpoint", "properties"]
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.1, 0.8))
        table = rng.choice(tables)
        op = rng.choice(ops)
        n += 1
        try:
            dt = DeltaTable(table)
            if op == "compact":
                dt.optimize.compact()
            elif op == "z_order":
                dt.optimize.z_order(["id"])
            elif op == "compact_vacuum":
                dt.optimize.compact()
                DeltaTable(table).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            elif op == "vacuum":
                dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            elif op == "checkpoint":
                dt.create_checkpoint()
            else:
                retention = os.environ.get("SLUICE_TEST_RETENTION", "interval 30 days")
                dt.alter.set_table_properties(
                    {
                        "delta.logRetentionDuration": retention,
                        "delta.deletedFileRetentionDuration": retention,
                        f"user.maintained{n % 3}": str(n),
                    },
                    raise_if_not_exists=False,
                )
            done.append([table, op])
        except Exception as e:  # noqa: BLE001 - classified below
            text = f"{type(e).__name__}: {e}"
            if "ommit" in text or "onflict" in text or "ransaction" in text:
                failed.append([table, op, text])
            else:
                print(json.dumps({"done": done, "error": [table, op, text]}))
                sys.exit(1)
    print(json.dumps({"done": done, "failed": failed}))


if __name__ == "__main__":
    main()
