"""Read a Delta table through delta-rs's query engine (DataFusion over the
Delta kernel), the delta-rs read path that applies deletion vectors, and
print {"version", "rows", "pyarrow_rows"} as JSON: rows is what the query
engine returns; pyarrow_rows is what DeltaTable.to_pyarrow_table() returns,
or the error text it raised (it reads data files without their deletion
vectors, so on a merge-on-read table it must refuse or would be wrong).

usage: read_dv_table.py TABLE_DIR
"""

import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def rows_of(tbl):
    cols = {n: tbl.column(n).to_pylist() for n in tbl.column_names}
    out = []
    for i in range(tbl.num_rows):
        row = {}
        for n in tbl.column_names:
            v = cols[n][i]
            if hasattr(v, "isoformat"):
                v = v.isoformat()
            row[n] = v
        out.append(row)
    return out


def main():
    dt = DeltaTable(sys.argv[1])
    reader = QueryBuilder().register("t", dt).execute("SELECT * FROM t")
    tbl = pa.table(reader.read_all())
    out = {"version": dt.version(), "rows": rows_of(tbl)}
    try:
        out["pyarrow_rows"] = rows_of(dt.to_pyarrow_table())
    except Exception as e:  # noqa: BLE001 - report what the reader said
        out["pyarrow_rows"] = "error: " + str(e)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
