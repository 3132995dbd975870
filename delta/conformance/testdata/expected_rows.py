"""Writes the rows another reader sees in a Delta table to a Parquet file.

Usage: expected_rows.py REQUESTS_JSON

REQUESTS_JSON holds a list of requests, answered in one process so that
the interpreter and deltalake start once. Each request names the output file and either a table for the deltalake
package (delta-rs) to read ({"mode": "deltalake", "table": DIR}), or data
files and column types for pyarrow to read and cast ({"mode": "cast",
"files": [...], "columns": [{"name": N, "type": DELTA_TYPE}]}), which is
how a type-widened table reads when deltalake cannot open it.
"""
import json
import os
import re
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def arrow_type(t):
    simple = {
        "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(),
        "integer": pa.int32(), "long": pa.int64(), "float": pa.float32(),
        "double": pa.float64(), "string": pa.string(), "binary": pa.binary(),
        "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if t in simple:
        return simple[t]
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError("unsupported type " + t)


def main():
    for req in json.loads(open(sys.argv[1]).read()):
        answer(req)


def answer(req):
    if req["mode"] == "deltalake":
        from deltalake import DeltaTable
        table = DeltaTable(req["table"]).to_pyarrow_table()
    else:
        parts = []
        for f in req["files"]:
            t = pq.read_table(f)
            cols, names = [], []
            for c in req["columns"]:
                typ = arrow_type(c["type"])
                if c["name"] in t.column_names:
                    cols.append(t.column(c["name"]).cast(typ))
                else:
                    cols.append(pa.nulls(t.num_rows, typ))
                names.append(c["name"])
            parts.append(pa.table(cols, names=names))
        table = pa.concat_tables(parts)
    pq.write_table(table, req["out"])


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # deltalake's native runtime now and then aborts ("terminate called
    # without an active exception") while the interpreter shuts down, after
    # the work is done; leaving without the teardown avoids that.
    os._exit(0)
