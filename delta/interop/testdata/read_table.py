"""Read a Delta table with delta-rs (the Python `deltalake` package) and print
what it sees as one JSON object on stdout, for the Go interop test to compare
with its own oracle.

usage: read_table.py TABLE_DIR|s3://BUCKET/PREFIX [--all-versions] [APP_ID ...]

An s3:// table is reached with the AWS_* environment (AWS_ENDPOINT_URL,
AWS_ALLOW_HTTP, credentials, region), which delta-rs reads itself.

Output keys:
  version       the table version deltalake loaded
  files         data file paths relative to the table root, sorted
  partitionColumns
  txn           {appId: version or null} for every APP_ID given
  rows          every row; values in a lossless, type-directed JSON form:
                  integers as JSON integers, floats as JSON numbers (repr, so
                  they round-trip to the same double) or "NaN"/"+Inf"/"-Inf",
                  decimals as plain decimal strings with the column's scale,
                  binary as base64, date as days since 1970-01-01, timestamp and
                  timestamp_ntz as microseconds since the epoch, null as null.
  history       with --all-versions: the same keys (but history) for every
                version from 0 to the latest, loaded by time travel
"""

import base64
import json
import math
import os
import sys
import urllib.parse

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable


def column_values(arr):
    t = arr.type
    if pa.types.is_date32(t):
        return arr.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            arr = arr.cast(pa.timestamp("us", tz=t.tz))
        return arr.cast(pa.int64()).to_pylist()
    if pa.types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in arr.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()]
    if pa.types.is_floating(t):
        out = []
        for v in arr.to_pylist():
            if v is None or math.isfinite(v):
                out.append(v)
            elif math.isnan(v):
                out.append("NaN")
            else:
                out.append("+Inf" if v > 0 else "-Inf")
        return out
    if pa.types.is_dictionary(t):
        return column_values(arr.cast(t.value_type))
    return arr.to_pylist()


def state(dt, table_dir, app_ids):
    """What deltalake sees of dt at the version it has loaded."""
    if table_dir.startswith("s3://"):
        root = table_dir.rstrip("/") + "/"
    else:
        root = os.path.abspath(table_dir).rstrip("/") + "/"
    files = []
    for uri in dt.file_uris():
        # file_uris are absolute, already decoded paths (a file:// URL on
        # some versions); report them relative to the table root.
        if uri.startswith("file://"):
            uri = urllib.parse.unquote(uri[len("file://"):])
        files.append(uri[len(root):] if uri.startswith(root) else uri)
    tbl = dt.to_pyarrow_table()
    cols = {name: column_values(tbl.column(name).combine_chunks()) for name in tbl.column_names}
    rows = [{name: cols[name][i] for name in tbl.column_names} for i in range(tbl.num_rows)]
    return {
        "version": dt.version(),
        "files": sorted(files),
        "partitionColumns": dt.metadata().partition_columns,
        "txn": {a: dt.transaction_version(a) for a in app_ids},
        "rows": rows,
    }


def main():
    args = sys.argv[1:]
    all_versions = "--all-versions" in args
    args = [a for a in args if a != "--all-versions"]
    table_dir, app_ids = args[0], args[1:]
    dt = DeltaTable(table_dir)
    out = state(dt, table_dir, app_ids)
    if all_versions:
        # Time travel: every version from 0 to the latest, each loaded by
        # deltalake on its own, to compare with our snapshot at that version.
        history = []
        for v in range(dt.version() + 1):
            old = DeltaTable(table_dir)
            old.load_as_version(v)
            history.append(state(old, table_dir, app_ids))
        out["history"] = history
    json.dump(out, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()
    # Leave without interpreter teardown: Arrow's scanner threads can still
    # be alive then and abort the process ("terminate called without an
    # active exception", a known pyarrow/delta-rs shutdown race), which
    # would fail a test whose work had all succeeded.
    os._exit(0)


if __name__ == "__main__":
    main()
