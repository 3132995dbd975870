"""Compare PostgreSQL source tables with cdcapply's Delta tables, row by row.

Usage (scripts/e2e.sh calls it):

  compare.py --psql "psql -h 127.0.0.1 -p 35432 -U postgres -d e2e_plain" \
             --table app.customers=/path/to/delta/customers [--table ...] \
             [--variant NAME] [--resent DUMPDIR] [--max-diffs 20]

The source side is read with psql (one JSON array per row, built by
json_build_array over explicitly cast columns); the table side is the Delta
table's current view read with Python deltalake (a reader we did not
write): rows with _cdc_deleted = true are hidden and the engine columns
_cdc_* dropped. Rows are matched by the source's primary key and compared
column by column. Both sides are normalised to one canonical Python value
per PostgreSQL type, explicitly (the table side holds what cdcapply's
documented type mapping, design/debezium.md, says it should):

  smallint, integer, bigint   int
  real                        the float32 value (both sides rounded to float32)
  double precision            float; NaN and +-Infinity compared as such
  numeric(p, s)               decimal.Decimal of PostgreSQL's text vs the Delta
                              decimal(p, s) value (exact; equal values compare
                              equal whatever the scale)
  numeric (no typmod)         decimal.Decimal of PostgreSQL's text vs the
                              Delta string column's text (Debezium's
                              VariableScaleDecimal carried as exact text)
  boolean                     bool
  text, varchar, char(n)      str exactly (char(n) keeps its blank padding)
  uuid                        lowercase str
  json, jsonb                 the exact text PostgreSQL outputs (json keeps
                              the inserted text, jsonb is normalised) vs the
                              Delta string
  bytea                       bytes (PostgreSQL hex output decoded)
  date                        datetime.date; +-infinity as 9999-12-31 /
                              0001-01-01 (the engine's documented mapping)
  timestamp                   microseconds since the epoch, the wall clock
                              read as UTC (Debezium's and the engine's rule);
                              +-infinity as 9999-12-31T23:59:59.999999 /
                              0001-01-01T00:00:00
  timestamptz                 microseconds since the epoch in UTC (session
                              TimeZone set to UTC); infinity as above
  time                        nanoseconds since midnight (Delta long)
  interval                    microseconds by Debezium's MicroDuration rule
                              (months of 365.25/12 days), recomputed in Python
                              from the interval's parts; Delta long
  arrays                      lists, each element by its type's rule

Prints, per table, the rows and values compared; on any difference a
readable diff (first --max-diffs: key, column, source value, table value)
and exit status 1.
"""

import argparse
import datetime as dt
import decimal
import glob
import json
import math
import os
import shlex
import struct
import subprocess
import sys
import base64

decimal.getcontext().prec = 200

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MAX_TS_MICROS = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)
MIN_TS_MICROS = (dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)


class Fail(Exception):
    pass


def psql(cmd, sql):
    args = shlex.split(cmd) + ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"]
    pre = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1;\n"
    p = subprocess.run(args, input=pre + sql, capture_output=True, text=True)
    if p.returncode != 0:
        raise Fail(f"psql failed: {p.stderr.strip()}")
    return [line for line in p.stdout.split("\n") if line != ""]


def columns(cmd, table):
    """[(name, typname, element typname or None, format_type)] in column order, and the key."""
    rows = psql(cmd, f"""
SELECT json_build_array(a.attname, t.typname, et.typname, format_type(a.atttypid, a.atttypmod))
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = '{table}'::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;""")
    cols = [tuple(json.loads(r)) for r in rows]
    key = [json.loads(r)[0] for r in psql(cmd, f"""
SELECT json_build_array(a.attname)
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = '{table}'::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int[], a.attnum::int);""")]
    if not key:
        raise Fail(f"{table}: no primary key")
    return cols, key


def source_expr(name, typname, elem):
    q = '"' + name.replace('"', '""') + '"'
    t = elem or typname
    if typname == "interval":
        return (f"CASE WHEN {q} IS NULL THEN NULL ELSE json_build_array(extract(year FROM {q})::int, extract(month FROM {q})::int, "
                f"extract(day FROM {q})::int, extract(hour FROM {q})::int, extract(minute FROM {q})::int, extract(second FROM {q})::text) END")
    if elem:
        if t in ("int2", "int4", "int8", "bool", "text", "varchar", "bpchar", "uuid"):
            return f"to_json({q})"
        # other arrays: elements as text ([] for an empty array, whose
        # unnest yields no rows)
        return f"CASE WHEN {q} IS NULL THEN NULL ELSE coalesce((SELECT json_agg(x::text) FROM unnest({q}) x), '[]'::json) END"
    if t == "bytea":
        return f"encode({q}, 'hex')"
    if t in ("int2", "int4", "int8", "bool", "text", "varchar", "bpchar"):
        return q
    return f"{q}::text"


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def float_canon(x, single):
    if isinstance(x, str):
        x = float(x)  # 'NaN', 'Infinity', '-Infinity' or digits
    if x is None:
        return None
    if math.isnan(x):
        return "NaN"
    return f32(x) if single else x


def parse_ts_micros(s, tz):
    if s == "infinity":
        return MAX_TS_MICROS
    if s == "-infinity":
        return MIN_TS_MICROS
    if s.endswith(" BC"):
        raise Fail(f"BC timestamp {s} not supported by the comparison")
    if tz:
        # '2024-02-29 11:45:56.123456+00' (TimeZone is UTC)
        if s.endswith("+00"):
            s = s[:-3]
        else:
            raise Fail(f"timestamptz {s!r} not in UTC")
    d = dt.datetime.fromisoformat(s).replace(tzinfo=dt.timezone.utc)
    return (d - EPOCH) // dt.timedelta(microseconds=1)


def parse_date(s):
    if s == "infinity":
        return dt.date(9999, 12, 31)
    if s == "-infinity":
        return dt.date(1, 1, 1)
    return dt.date.fromisoformat(s)


def time_nanos(s):
    h, m, sec = s.split(":")
    whole, _, frac = sec.partition(".")
    return ((int(h) * 60 + int(m)) * 60 + int(whole)) * 1_000_000_000 + int((frac + "000000000")[:9])


def interval_micros(parts):
    # io.debezium.time.MicroDuration.durationMicros, in doubles, truncated
    # toward zero like Java's (long) cast.
    years, months, days, hours, minutes, seconds = parts
    number_of_days = (years * 12 + months) * (365.25 / 12.0) + days
    number_of_seconds = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + float(seconds)
    return int(number_of_seconds * 1e6)


def canon_source(typname, v):
    """Canonical value of a source column (as json_build_array gave it)."""
    if v is None:
        return None
    if typname in ("int2", "int4", "int8"):
        return int(v)
    if typname == "float4":
        return float_canon(v, True)
    if typname == "float8":
        return float_canon(v, False)
    if typname == "numeric":
        return decimal.Decimal(v)
    if typname == "bool":
        return bool(v)
    if typname in ("text", "varchar", "bpchar", "json", "jsonb"):
        return v
    if typname == "uuid":
        return v.lower()
    if typname == "bytea":
        return bytes.fromhex(v)
    if typname == "date":
        return parse_date(v)
    if typname == "timestamp":
        return parse_ts_micros(v, False)
    if typname == "timestamptz":
        return parse_ts_micros(v, True)
    if typname == "time":
        return time_nanos(v)
    if typname == "interval":
        return interval_micros(v)
    return v


def canon_table(typname, v):
    """Canonical value of a Delta column as pyarrow's to_pylist gave it
    (timestamps already cast to int64 microseconds)."""
    if v is None:
        return None
    if isinstance(v, dt.datetime):  # array elements are not cast to int64
        return (v - EPOCH) // dt.timedelta(microseconds=1)
    if typname in ("int2", "int4", "int8", "time", "interval", "timestamp", "timestamptz"):
        return int(v)
    if typname == "float4":
        return float_canon(v, True)
    if typname == "float8":
        return float_canon(v, False)
    if typname == "numeric":
        return decimal.Decimal(v) if isinstance(v, str) else v
    if typname == "uuid":
        return v.lower()
    if typname == "bytea":
        return bytes(v)
    return v


def canon(side, typname, elem, v):
    f = canon_source if side == "source" else canon_table
    if elem is not None:
        if v is None:
            return None
        return tuple(f(elem, x) for x in v)
    return f(typname, v)


def read_source(cmd, table, cols):
    exprs = ", ".join(source_expr(n, t, e) for n, t, e, _ in cols)
    rows = psql(cmd, f"SELECT json_build_array({exprs}) FROM {table};")
    return [json.loads(r) for r in rows]


def read_table(path):
    import pyarrow as pa
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    names = t.column_names
    if "_cdc_deleted" not in names:
        raise Fail(f"{path}: no _cdc_deleted column (columns {names})")
    out_cols = {}
    for name in names:
        col = t.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        out_cols[name] = col.to_pylist()
    n = t.num_rows
    deleted = out_cols["_cdc_deleted"]
    live = [i for i in range(n) if deleted[i] is not True]
    data = [c for c in names if not c.startswith("_cdc_")]
    rows = [{c: out_cols[c][i] for c in data} for i in live]
    return data, rows, n - len(live), DeltaTable(path).version()


def show(v):
    if isinstance(v, bytes):
        s = v.hex()
        return f"bytes[{len(v)}] {s[:48]}{'...' if len(s) > 48 else ''}"
    s = repr(v)
    return s if len(s) <= 120 else s[:117] + "..."


def compare_table(cmd, table, path, max_diffs):
    cols, key = columns(cmd, table)
    names = [c[0] for c in cols]
    src_rows = read_source(cmd, table, cols)
    tcols, trows, tombstones, version = read_table(path)
    diffs = []
    missing_cols = [c for c in names if c not in tcols]
    extra_cols = [c for c in tcols if c not in names]
    for c in missing_cols:
        diffs.append(f"column {c}: in the source, not in the table")
    for c in extra_cols:
        diffs.append(f"column {c}: in the table, not in the source")
    kidx = [names.index(k) for k in key]

    src = {}
    for r in src_rows:
        vals = [canon("source", t, e, v) for (_, t, e, _), v in zip(cols, r)]
        src[tuple(vals[i] for i in kidx)] = vals
    tab = {}
    for r in trows:
        vals = [canon("table", t, e, r.get(n)) for (n, t, e, _) in cols]
        k = tuple(vals[i] for i in kidx)
        if k in tab:
            diffs.append(f"key {k}: more than one live row in the table")
        tab[k] = vals

    values = 0
    for k in sorted(src.keys() | tab.keys(), key=repr):
        s, t = src.get(k), tab.get(k)
        if t is None:
            diffs.append(f"key {show(k)}: in the source, not live in the table")
            continue
        if s is None:
            diffs.append(f"key {show(k)}: live in the table, not in the source: {show(t)}")
            continue
        for i, (n, _, _, ftype) in enumerate(cols):
            if n in missing_cols:
                continue
            values += 1
            if s[i] != t[i]:
                diffs.append(f"key {show(k)} column {n} ({ftype}): source {show(s[i])}, table {show(t[i])}")
    both = len(src.keys() & tab.keys())
    status = "equal" if not diffs else f"{len(diffs)} DIFFERENCES"
    print(f"  {table:<18} source {len(src):>5} rows | table v{version}: {len(tab):>5} live, {tombstones:>4} tombstones hidden | "
          f"{both:>5} rows x {len(cols)} columns = {values:>6} values compared: {status}", flush=True)
    for d in diffs[:max_diffs]:
        print(f"      {d}", flush=True)
    if len(diffs) > max_diffs:
        print(f"      ... and {len(diffs) - max_diffs} more", flush=True)
    return len(diffs), both, values


def resent(dump_dir):
    """Counts change events Debezium sent more than once (same topic, key,
    op and source position), from a dump of the variant's topics."""
    seen, dup, total = set(), 0, 0
    for f in sorted(glob.glob(os.path.join(dump_dir, "*.jsonl"))):
        if ".app." not in os.path.basename(f):
            continue
        for line in open(f):
            r = json.loads(line)
            if not r["value_b64"]:
                continue
            v = json.loads(base64.b64decode(r["value_b64"]))
            p = v.get("payload", v)
            src = p.get("source") or {}
            if p.get("op") in (None, "r"):
                continue
            ident = (r["topic"], r["key_b64"], p.get("op"), src.get("lsn"), src.get("sequence"))
            total += 1
            if ident in seen:
                dup += 1
            seen.add(ident)
    return dup, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--psql", required=True)
    ap.add_argument("--table", action="append", required=True, help="schema.table=delta-path")
    ap.add_argument("--variant", default="")
    ap.add_argument("--resent", help="dump directory of the variant's topics: count re-sent change events")
    ap.add_argument("--max-diffs", type=int, default=20)
    a = ap.parse_args()
    print(f"compare {a.variant}: PostgreSQL (psql) vs Delta current view (deltalake), by primary key", flush=True)
    total_diffs = total_rows = total_values = 0
    for spec in a.table:
        table, _, path = spec.partition("=")
        try:
            d, rows, values = compare_table(a.psql, table, path, a.max_diffs)
        except Fail as e:
            print(f"  {table}: ERROR {e}", flush=True)
            d, rows, values = 1, 0, 0
        total_diffs += d
        total_rows += rows
        total_values += values
    if a.resent:
        dup, total = resent(a.resent)
        print(f"  topics: {total} streamed change events, {dup} of them re-sent by Debezium (same topic, key, op, lsn)", flush=True)
    verdict = "EQUAL" if total_diffs == 0 else f"DIFFERENT ({total_diffs} differences)"
    print(f"compare {a.variant}: {len(a.table)} tables, {total_rows} rows, {total_values} values: {verdict}", flush=True)
    sys.stdout.flush()
    # os._exit skips a known pyarrow abort at interpreter shutdown.
    os._exit(0 if total_diffs == 0 else 1)


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        print(f"compare: {e}", file=sys.stderr, flush=True)
        os._exit(2)
