"""What both peers share: the command line of bench/peers/CONTRACT.md, the
source columns read from a Debezium record's inline schema, the sequence
in cdcapply's encoding, and the final JSON line.

Nothing here is timed on its own; each peer decides what its clock covers
(CONTRACT.md: from the first line read to the last batch committed).
"""

import argparse
import base64
import json
import os
import sys
import time

try:  # the fastest JSON parser a Python deployment would reach for
    import orjson

    loads = orjson.loads
except ImportError:  # pragma: no cover - setup.sh installs orjson
    loads = json.loads

# Debezium's unavailable.value.placeholder default: an unchanged TOASTed value.
UNAVAILABLE = "__debezium_unavailable_value"

# The change ops; anything else (m, t, heartbeats) is not a row change.
CHANGE_OPS = frozenset(("c", "u", "d", "r"))


def parse_args(peer):
    p = argparse.ArgumentParser(description=f"{peer} peer of cdcapply bench (bench/peers/CONTRACT.md)")
    p.add_argument("--input", required=True, help="JSON lines as `bench/workload/cmd dump` writes them")
    p.add_argument("--table", required=True, help="the Delta table to create")
    p.add_argument("--batch-size", type=int, required=True, help="records per micro-batch")
    p.add_argument("--max-batches", type=int, default=0, help="stop after this many batches (0: all)")
    return p


def log(peer, msg):
    print(f"{time.strftime('%H:%M:%S')} [{peer}] {msg}", file=sys.stderr, flush=True)


def emit(result):
    """The last line of stdout: the harness parses it."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


class Column:
    """One source column: its name, Delta/Arrow kind and, for decimals, scale."""

    __slots__ = ("name", "kind", "scale", "precision", "optional")

    def __init__(self, name, kind, scale=0, precision=0, optional=True):
        self.name, self.kind, self.scale, self.precision, self.optional = name, kind, scale, precision, optional

    def __repr__(self):
        return f"Column({self.name}, {self.kind})"


def columns_from_value(value):
    """The row columns from a Debezium JsonConverter value's inline schema
    (the `after` field of the envelope), typed as cdcapply's schema package
    types them: int32 -> integer, int64 -> long, MicroTimestamp ->
    timestamp (microseconds), Connect Decimal -> decimal(precision, scale),
    boolean, string."""
    env = value["schema"]
    after = next(f for f in env["fields"] if f["field"] == "after")
    cols = []
    for f in after["fields"]:
        name, typ, sem = f["field"], f["type"], f.get("name")
        opt = f.get("optional", True)
        if sem == "io.debezium.time.MicroTimestamp":
            cols.append(Column(name, "timestamp_us", optional=opt))
        elif sem == "org.apache.kafka.connect.data.Decimal":
            params = f.get("parameters", {})
            cols.append(Column(name, "decimal", scale=int(params["scale"]),
                               precision=int(params.get("connect.decimal.precision", 38)), optional=opt))
        elif sem is not None:
            raise ValueError(f"column {name}: logical type {sem} is not handled by this peer")
        elif typ in ("int8", "int16", "int32"):
            cols.append(Column(name, "int32", optional=opt))
        elif typ == "int64":
            cols.append(Column(name, "int64", optional=opt))
        elif typ == "boolean":
            cols.append(Column(name, "bool", optional=opt))
        elif typ == "string":
            cols.append(Column(name, "string", optional=opt))
        else:
            raise ValueError(f"column {name}: type {typ} is not handled by this peer")
    return cols


def first_value(path):
    """The first record of the file with a value, decoded (for its schema)."""
    with open(path, "rb") as f:
        for line in f:
            rec = loads(line)
            if rec.get("value_b64"):
                return loads(base64.b64decode(rec["value_b64"]))
    raise ValueError(f"{path}: no record with a value")


def proc_cpu_seconds(pid):
    """User + system CPU seconds of process pid (all its threads) from
    /proc/<pid>/stat; the machine is shared, so the peers report CPU time
    beside wall time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _part(x):
    return "00" if x is None else "01%016x" % int(x)


def pg_seq_hex(source):
    """The PostgreSQL connector's sequence as cdcapply's `_cdc_seq`: the
    order-preserving key of (lastCommitLsn, lsn) in lowercase hex (apply
    layout, debezium.Sequence.AppendKey): connector byte 01, then per part
    00 for null or 01 + 8 bytes big-endian. Falls back to (null, lsn)."""
    seq = source.get("sequence")
    if seq is not None:
        last, lsn = loads(seq)
        if lsn is None:
            raise ValueError("source.sequence has a null lsn")
        return "01" + _part(last) + _part(lsn)
    lsn = source.get("lsn")
    if lsn is None:
        raise ValueError("no source.sequence and no source.lsn")
    return "01" + _part(None) + _part(lsn)


def batches(path, size, max_batches=0):
    """Yields lists of raw lines, `size` at a time, in file order."""
    n = 0
    with open(path, "rb") as f:
        while True:
            lines = []
            for line in f:
                lines.append(line)
                if len(lines) == size:
                    break
            if not lines:
                return
            yield lines
            n += 1
            if max_batches and n >= max_batches:
                return
