"""Peer 1 of issue 5: delta-rs MERGE through the Python `deltalake` package,
micro-batch by micro-batch (bench/peers/CONTRACT.md, bench/peers/README.md).

Per batch of N records, everything a Python deployment on delta-rs does:
decode each Kafka value (Debezium PostgreSQL JSON with the inline schema),
keep the changes (op c/u/d/r), reduce to the newest change per key by
source sequence while folding unavailable (TOAST placeholder) values and
deletes from older changes of the key in the batch, then one
`DeltaTable.merge` guarded by `s._cdc_seq > t._cdc_seq` that inserts new
keys, updates newer ones and keeps deletes as tombstone rows. One merge is
one Delta commit.

TOAST and deletes, as a correct deployment must handle them: every
non-key column travels with `<col>__from`, the sequence of the change in
the batch that carried its value (NULL when no change in the batch did:
a delete with no older change, or a placeholder). The update takes the
table's value when nothing in the batch carried one or the table's row is
newer than the carrier, else the batch's value.
"""

import base64
import decimal
import sys
import time

import pyarrow as pa
from deltalake import DeltaTable, __version__ as deltalake_version

import peercommon as pc

PEER = "deltars"


def arrow_type(c):
    return {
        "int32": pa.int32(),
        "int64": pa.int64(),
        "bool": pa.bool_(),
        "string": pa.string(),
        "timestamp_us": pa.timestamp("us", tz="UTC"),
    }.get(c.kind) or pa.decimal128(c.precision, c.scale)


def table_schema(cols):
    fields = [pa.field(cols[0].name, arrow_type(cols[0]), nullable=False)]
    fields += [pa.field(c.name, arrow_type(c), nullable=True) for c in cols[1:]]
    fields += [pa.field("_cdc_seq", pa.string(), nullable=False), pa.field("_cdc_deleted", pa.bool_(), nullable=False)]
    return pa.schema(fields)


def decimal_of(b64, scale):
    return decimal.Decimal(int.from_bytes(base64.b64decode(b64), "big", signed=True)).scaleb(-scale)


class Reducer:
    """Parses one batch's records and reduces them to one source row per key."""

    def __init__(self, cols):
        self.cols = cols
        self.key = cols[0].name
        self.rest = cols[1:]
        self.decimals = [i for i, c in enumerate(self.rest) if c.kind == "decimal"]

    def reduce(self, lines):
        loads, b64 = pc.loads, base64.b64decode
        # The file's framing (a JSON line with the value in base64) stands
        # for a Kafka fetch: timed apart as input_seconds.
        t0 = time.perf_counter()
        records = []
        for line in lines:
            rec = loads(line)
            vb = rec.get("value_b64")
            if vb is not None:  # else a Kafka tombstone
                records.append((rec, b64(vb)))
        t_input = time.perf_counter() - t0
        by_key = {}
        changes = 0
        for rec, raw in records:
            val = loads(raw)
            p = val.get("payload", val) if "schema" in val else val
            op = p.get("op")
            if op not in pc.CHANGE_OPS:
                continue
            changes += 1
            try:
                seq = pc.pg_seq_hex(p["source"])
            except (KeyError, ValueError) as e:
                raise ValueError(f"topic {rec['topic']} partition {rec['partition']} offset {rec['offset']}: {e}") from e
            if op == "d":
                img, after = p["before"], None
            else:
                img = after = p["after"]
            by_key.setdefault(img[self.key], []).append((seq, op, after))

        rest, n = self.rest, len(self.rest)
        names = [c.name for c in rest]
        ids, seqs, dels, ops = [], [], [], []
        vals = [[] for _ in range(n)]
        froms = [[] for _ in range(n)]
        U = pc.UNAVAILABLE
        for k, chs in by_key.items():
            if len(chs) > 1:
                chs.sort(key=lambda ch: ch[0])
            v = [None] * n
            f = [None] * n
            for seq, op, after in chs:
                if after is None:  # a delete carries no value: every column folds
                    continue
                for i in range(n):
                    x = after.get(names[i])
                    if x == U:
                        continue
                    v[i] = x
                    f[i] = seq
            seq, op, _ = chs[-1]
            ids.append(k)
            seqs.append(seq)
            dels.append(op == "d")
            ops.append(op)
            for i in range(n):
                vals[i].append(v[i])
                froms[i].append(f[i])
        for i in self.decimals:
            sc = rest[i].scale
            vals[i] = [None if x is None else decimal_of(x, sc) for x in vals[i]]
        arrays = [pa.array(ids, pa.int64())]
        arrays += [pa.array(vals[i], arrow_type(rest[i])) for i in range(n)]
        arrays += [pa.array(seqs, pa.string()), pa.array(dels, pa.bool_())]
        arrays += [pa.array(froms[i], pa.string()) for i in range(n)]
        names_all = [self.key] + names + ["_cdc_seq", "_cdc_deleted"] + [c + "__from" for c in names]
        return pa.Table.from_arrays(arrays, names=names_all), changes, t_input


def merge_clauses(cols):
    rest = [c.name for c in cols[1:]]
    update = {c: f"CASE WHEN s.{c}__from IS NULL OR s.{c}__from < t._cdc_seq THEN t.{c} ELSE s.{c} END" for c in rest}
    update["_cdc_seq"] = "s._cdc_seq"
    update["_cdc_deleted"] = "s._cdc_deleted"
    insert = {c.name: f"s.{c.name}" for c in cols}
    insert["_cdc_seq"] = "s._cdc_seq"
    insert["_cdc_deleted"] = "s._cdc_deleted"
    return update, insert


def main(argv):
    args = pc.parse_args(PEER).parse_args(argv)
    cols = pc.columns_from_value(pc.first_value(args.input))
    red = Reducer(cols)
    update, insert = merge_clauses(cols)
    key = cols[0].name
    pc.log(PEER, f"deltalake {deltalake_version}, pyarrow {pa.__version__}; {len(cols)} columns; batch {args.batch_size}")

    events = batches = changes = 0
    t_input = t_parse = t_merge = 0.0
    dt = None
    start, cpu0 = time.perf_counter(), time.process_time()
    for lines in pc.batches(args.input, args.batch_size, args.max_batches):
        t0 = time.perf_counter()
        src, nch, tin = red.reduce(lines)
        t1 = time.perf_counter()
        if dt is None:
            dt = DeltaTable.create(args.table, schema=table_schema(cols), mode="error",
                                   name="orders_peer_deltars")
        if src.num_rows:
            metrics = (
                dt.merge(src, f"t.{key} = s.{key}", source_alias="s", target_alias="t", streamed_exec=False)
                .when_matched_update(update, predicate="s._cdc_seq > t._cdc_seq")
                .when_not_matched_insert(insert)
                .execute()
            )
        else:
            metrics = {}
        t2 = time.perf_counter()
        events += len(lines)
        changes += nch
        batches += 1
        t_input += tin
        t_parse += t1 - t0 - tin
        t_merge += t2 - t1
        pc.log(PEER, f"batch {batches}: cpu {time.process_time() - cpu0:.1f}s so far; {len(lines)} records, {src.num_rows} keys, input {tin:.2f}s, parse+reduce {t1 - t0 - tin:.2f}s, "
                     f"merge {t2 - t1:.2f}s (+{metrics.get('num_target_rows_inserted', 0)} ins, "
                     f"{metrics.get('num_target_rows_updated', 0)} upd, "
                     f"{metrics.get('num_target_files_added', 0)} files added, "
                     f"{metrics.get('num_target_files_removed', 0)} removed)")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if dt is None:
        raise SystemExit(f"{args.input}: no records")
    pc.emit({
        "peer": PEER, "events": events, "seconds": round(seconds, 3), "batches": batches,
        "cpu_seconds": round(cpu, 3), "changes": changes, "input_seconds": round(t_input, 3), "parse_reduce_seconds": round(t_parse, 3), "merge_seconds": round(t_merge, 3),
        "table_version": dt.version(),
        "versions": {"deltalake": deltalake_version, "pyarrow": pa.__version__, "python": sys.version.split()[0]},
    })


if __name__ == "__main__":
    main(sys.argv[1:])
