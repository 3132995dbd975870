"""Write Delta tables with delta-rs (the Python `deltalake` package) for the Go
interop test to read with cdcapply's own reader.

usage: write_table.py OUT_DIR

Creates OUT_DIR/partitioned and OUT_DIR/flat, each through several commits
(create, append, delete, merge, predicate overwrite, a checkpoint, appends
after it) carrying app transactions, and prints {"tables": {name: [appId,...]}}
so the test knows which app ids to ask both readers about. The rows themselves
are not printed here: the test reads them back through read_table.py, which
is deltalake's view, and compares that with its own.
"""

import datetime
import decimal
import json
import os
import sys

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec_small", pa.decimal128(9, 2)),
        ("dec_large", pa.decimal128(38, 10)),
        ("s", pa.string()),
        ("bin", pa.binary()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ts_ntz", pa.timestamp("us")),
    ]
)

# Partition values chosen to exercise the path escaping of partition folders.
REGIONS = ["eu", "us west", "a=b/c%d", None]

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def row(i, gen=0):
    """One deterministic row; gen distinguishes a merged update from the insert."""
    if i % 7 == 6:
        # A row of nulls (but for the key) in every type.
        return {"id": i, "region": REGIONS[i % len(REGIONS)], **{f.name: None for f in SCHEMA if f.name not in ("id", "region")}}
    sign = -1 if i % 2 else 1
    return {
        "id": i,
        "region": REGIONS[i % len(REGIONS)],
        "b": i % 3 == 0,
        "i8": [-128, 127, 0, 5][i % 4] + (0 if i % 4 < 2 else gen),
        "i16": [-32768, 32767, -1, 300][i % 4],
        "i32": [-(2**31), 2**31 - 1, i * 1000 + gen, -7][i % 4],
        "f32": [1.5, -0.1, 3.4028234663852886e38, 1e-45][i % 4],
        "f64": [0.1 * i + gen, -1e308, 5e-324, float("inf")][i % 4],
        "dec_small": decimal.Decimal(sign * (i * 1001 + gen)).scaleb(-2),
        "dec_large": decimal.Decimal(sign * (10**27 + i * 123456789 + gen)).scaleb(-10),
        "s": ["", "plain", "unicodé ✓ 日本", "quote\" and \\ slash"][i % 4] + str(gen or ""),
        "bin": bytes([0, i % 256, 255, gen % 256]),
        "d": datetime.date(1970, 1, 1) + datetime.timedelta(days=sign * i * 4000),
        "ts": EPOCH + datetime.timedelta(microseconds=sign * (i * 86_400_000_123 + gen)),
        "ts_ntz": datetime.datetime(2000, 2, 29, 12, 0, 0) + datetime.timedelta(microseconds=sign * i * 3_600_000_001),
    }


def batch(ids, gen=0):
    return pa.Table.from_pylist([row(i, gen) for i in ids], schema=SCHEMA)


def txns(**versions):
    return CommitProperties(app_transactions=[Transaction(a, v) for a, v in versions.items()])


def build(path, partition_by):
    # v0: create
    write_deltalake(path, batch(range(0, 12)), partition_by=partition_by, commit_properties=txns(**{"py-app-1": 5}))
    # v1: append
    write_deltalake(path, batch(range(12, 24)), mode="append", commit_properties=txns(**{"py-app-1": 7, "py-app-2": 1}))
    dt = DeltaTable(path)
    # v2: delete (rewrites or removes files: remove actions)
    dt.delete("id < 3 OR id = 13", commit_properties=txns(**{"py-app-3": 0}))
    # v3: merge: update some ids, insert new ones
    (
        dt.merge(batch([5, 7, 15, 40, 41], gen=9), predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    # v4: checkpoint at v3, then more commits replayed on top of it
    dt.create_checkpoint()
    write_deltalake(path, batch(range(24, 30)), mode="append", commit_properties=txns(**{"py-app-2": 2}))
    # v5: replace the rows matching a predicate (removes + adds in one commit)
    write_deltalake(path, batch([20, 21, 22, 50], gen=3), mode="overwrite", predicate="id >= 20 AND id <= 22 OR id = 50")
    # v6: a plain append with no txn
    write_deltalake(path, batch(range(60, 63)), mode="append")
    return ["py-app-1", "py-app-2", "py-app-3", "py-app-absent"]


def main():
    out = sys.argv[1]
    tables = {
        "partitioned": build(os.path.join(out, "partitioned"), ["region"]),
        "flat": build(os.path.join(out, "flat"), None),
    }
    json.dump({"tables": tables}, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    # Leave without interpreter teardown: Arrow's scanner threads can still
    # be alive then and abort the process ("terminate called without an
    # active exception", a known pyarrow/delta-rs shutdown race), which
    # would fail a test whose work had all succeeded.
    os._exit(0)


if __name__ == "__main__":
    main()
