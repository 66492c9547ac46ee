"""python-mysql-replication peer for benches/e2e.sh.

Streams the binlog from START to HEAD as a replica (file/position dump) and
touches every value of every row image, then prints one JSON line with the
counts. Arguments: HOST PORT USER PASSWORD SERVER_ID START_FILE START_POS
HEAD_FILE HEAD_POS.
"""

import json
import sys

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent


def key(file, pos):
    return (int(file.rsplit(".", 1)[1]), int(pos))


def main():
    host, port, user, password, server_id, start_file, start_pos, head_file, head_pos = sys.argv[1:10]
    head = key(head_file, head_pos)
    stream = BinLogStreamReader(
        connection_settings={"host": host, "port": int(port), "user": user, "passwd": password},
        server_id=int(server_id),
        resume_stream=True,
        log_file=start_file,
        log_pos=int(start_pos),
        blocking=False,  # the server sends EOF at the end of the binlog
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, RotateEvent],
        enable_logging=False,
    )
    rows = values = 0
    try:
        for event in stream:
            if isinstance(event, (WriteRowsEvent, DeleteRowsEvent)):
                for row in event.rows:
                    rows += 1
                    for _ in row["values"].values():
                        values += 1
            elif isinstance(event, UpdateRowsEvent):
                for row in event.rows:
                    rows += 1
                    for _ in row["before_values"].values():
                        values += 1
                    for _ in row["after_values"].values():
                        values += 1
            elif isinstance(event, XidEvent) and key(stream.log_file, stream.log_pos) >= head:
                break
    finally:
        stream.close()
    print(json.dumps({"rows": rows, "values": values, "end": f"{stream.log_file}:{stream.log_pos}"}))


if __name__ == "__main__":
    main()
