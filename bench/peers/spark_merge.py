"""Peer 2 of issue 5: Spark with Delta Lake running the foreachBatch pattern of
the worked example (../shared/seeds/000_21159916afb2b88c.txt): each
micro-batch is reduced to the latest change per key with row_number() over
the key ordered by sequence descending, then MERGEd into the Delta table
guarded by s._cdc_seq > t._cdc_seq, with deletes kept as tombstone rows
(bench/peers/CONTRACT.md, bench/peers/README.md).

It is a real Structured Streaming query, local[2]: the input file is cut
into one file per micro-batch (the harness's batch boundaries) before the
clock starts, and a file stream source with maxFilesPerTrigger=1 feeds
foreachBatch, so every batch pays what a streaming deployment pays (offset
and commit logs in the checkpoint, the batch's plan, the MERGE). A Kafka
source would hand foreachBatch binary values; here the value arrives as
base64 inside a JSON line and is decoded with unbase64 + CAST AS STRING, the
same CAST a Kafka deployment writes, then parsed with from_json.

TOAST and deletes: the worked example keeps a deleted row's values with
CASE WHEN s.op = 'd' THEN t.col. Debezium adds unchanged TOASTed values
(the placeholder) and out-of-order delivery, so every non-key column is
reduced to the newest change in the batch that carried a value (max over
struct(seq, value), the same window as row_number) with that change's
sequence in <col>__from; the MERGE takes the table's value when nothing in
the batch carried one or the table's row is newer than the carrier.
"""

import os
import shutil
import sys
import tempfile
import time

import peercommon as pc

PEER = "spark"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def jar_paths():
    d = os.environ.get("CDCAPPLY_PEERS_JARS") or os.path.join(REPO, ".cache", "peers-jars")
    jars = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jar")) if os.path.isdir(d) else []
    if not any(os.path.basename(j).startswith("delta-spark_") for j in jars):
        raise SystemExit(f"no Delta jars in {d}: run bench/peers/setup.sh")
    return jars


def split_input(path, size, max_batches, out):
    """Cuts the input into one file per micro-batch (lines [0,N), [N,2N), ...)
    with increasing modification times, so the file source takes them in
    order, one per trigger. Returns (files, lines)."""
    files = lines = 0
    now = time.time() - 10 * 24 * 3600
    for batch in pc.batches(path, size, max_batches):
        name = os.path.join(out, "batch-%08d.jsonl" % files)
        with open(name, "wb") as f:
            f.writelines(batch)
        os.utime(name, (now + files, now + files))
        files += 1
        lines += len(batch)
    return files, lines


def spark_type(c):
    return {"int32": "INT", "int64": "BIGINT", "bool": "BOOLEAN", "string": "STRING",
            "timestamp_us": "TIMESTAMP"}.get(c.kind) or f"DECIMAL({c.precision},{c.scale})"


def json_type(c):
    """How the column travels in the JsonConverter payload."""
    return {"int32": "INT", "int64": "BIGINT", "bool": "BOOLEAN", "string": "STRING",
            "timestamp_us": "BIGINT", "decimal": "STRING"}[c.kind]


def main(argv):
    args = pc.parse_args(PEER).parse_args(argv)
    cols = pc.columns_from_value(pc.first_value(args.input))
    key, rest = cols[0].name, cols[1:]
    table = os.path.abspath(args.table)
    work = tempfile.mkdtemp(prefix="spark-peer-", dir=os.path.dirname(table))
    try:
        run(args, cols, key, rest, table, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, cols, key, rest, table, work):
    t0 = time.perf_counter()
    chunks = os.path.join(work, "input")
    os.makedirs(chunks)
    nfiles, nlines = split_input(args.input, args.batch_size, args.max_batches, chunks)
    split_seconds = time.perf_counter() - t0
    pc.log(PEER, f"input cut into {nfiles} batch files ({nlines} records) in {split_seconds:.1f}s")

    t0 = time.perf_counter()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from delta.tables import DeltaTable
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cdcapply-peer-spark-merge")
        .config("spark.jars", ",".join(jar_paths()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # 2 cores / 24 GiB shared with the engine under test and others: the
        # driver is the executor in local mode.
        .config("spark.driver.memory", os.environ.get("CDCAPPLY_SPARK_DRIVER_MEMORY", "6g"))
        .config("spark.sql.shuffle.partitions", "4")
        # Loopback only (the machine's other addresses are not ours to use),
        # and timeouts that survive a loaded machine: a late heartbeat must
        # not fail a batch.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.network.timeout", "900s")
        .config("spark.executor.heartbeatInterval", "60s")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "false")
        .config("spark.local.dir", os.path.join(work, "tmp"))
        # Else Spark makes an empty spark-warehouse in its working directory
        # (the repository, where the harness runs peers).
        .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + os.path.join(work, "derby"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    delta_jar = next(os.path.basename(j) for j in jar_paths() if os.path.basename(j).startswith("delta-spark_"))

    ddl = ", ".join([f"`{key}` BIGINT NOT NULL"] + [f"`{c.name}` {spark_type(c)}" for c in rest]
                    + ["`_cdc_seq` STRING NOT NULL", "`_cdc_deleted` BOOLEAN NOT NULL"])
    spark.sql(f"CREATE TABLE delta.`{table}` ({ddl}) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    startup_seconds = time.perf_counter() - t0
    pc.log(PEER, f"pyspark {pyspark.__version__}, {delta_jar}: session and empty table in {startup_seconds:.1f}s")

    # The Debezium envelope's payload as from_json reads it.
    row = ", ".join(f"`{c.name}`: {json_type(c)}" for c in cols)
    envelope = (f"STRUCT<payload: STRUCT<before: STRUCT<{row}>, after: STRUCT<{row}>, "
                "source: STRUCT<sequence: STRING, lsn: BIGINT>, op: STRING>>")
    framing = "STRUCT<topic: STRING, `partition`: INT, offset: BIGINT, key_b64: STRING, value_b64: STRING>"

    def part(x):
        return F.when(x.isNull(), F.lit("00")).otherwise(
            F.concat(F.lit("01"), F.lpad(F.lower(F.hex(x.cast("bigint"))), 16, "0")))

    def decode(c, x):
        if c.kind == "timestamp_us":
            return F.timestamp_micros(x)
        if c.kind == "decimal":
            # Connect Decimal: base64 of the big-endian two's-complement unscaled value.
            h = F.hex(F.unbase64(x))
            u = F.conv(h, 16, 10).cast("decimal(38,0)")
            neg = F.conv(F.substring(h, 1, 2), 16, 10).cast("int") >= 128
            full = F.pow(F.lit(2), F.length(h) * 4).cast("decimal(38,0)")
            signed = F.when(neg, u - full).otherwise(u)
            return (signed / F.lit(10 ** c.scale)).cast(spark_type(c))
        return x

    state = {"batches": 0}

    def reduce_batch(batch):
        """Parse and reduce one micro-batch of text lines to one row per key."""
        rec = batch.select(F.from_json("value", framing).alias("r")).select("r.*")
        kv = rec.where(F.col("value_b64").isNotNull()).select(
            F.from_json(F.unbase64("value_b64").cast("string"), envelope).alias("v"))
        p = kv.select("v.payload.*").where(F.col("op").isin("c", "u", "d", "r"))
        seq_parts = F.from_json(F.col("source.sequence"), "ARRAY<STRING>")
        seq = F.when(F.col("source.sequence").isNotNull(),
                     F.concat(F.lit("01"), part(seq_parts[0]), part(seq_parts[1]))) \
            .otherwise(F.concat(F.lit("01"), F.lit("00"), part(F.col("source.lsn"))))
        sel = [F.coalesce(F.col(f"after.`{key}`"), F.col(f"before.`{key}`")).alias(key), "seq", "op"]
        for c in rest:
            x = F.col(f"after.`{c.name}`")
            carried = F.col("op") != "d"
            if c.kind == "string":
                carried = carried & ~x.eqNullSafe(pc.UNAVAILABLE)
            sel.append(F.when(carried, F.struct(F.col("seq").alias("s"), decode(c, x).alias("v")))
                       .alias(c.name))
        changes = p.withColumn("seq", seq).select(*sel)

        by_key = Window.partitionBy(key)
        newest_first = Window.partitionBy(key).orderBy(F.col("seq").desc())
        latest = (
            changes.select(
                key, "seq", "op",
                F.row_number().over(newest_first).alias("rn"),
                *[F.max(c.name).over(by_key).alias(c.name) for c in rest])
            .filter("rn = 1")
            .select(key, F.col("seq").alias("_cdc_seq"), (F.col("op") == "d").alias("_cdc_deleted"),
                    *[F.col(f"{c.name}.v").alias(c.name) for c in rest],
                    *[F.col(f"{c.name}.s").alias(c.name + "__from") for c in rest])
        )
        return latest

    def apply_changes(batch, batch_id):
        """What foreachBatch calls: parse, reduce (row_number), MERGE."""
        latest = reduce_batch(batch)
        update = {f"`{c.name}`": f"CASE WHEN s.`{c.name}__from` IS NULL OR s.`{c.name}__from` < t._cdc_seq "
                                 f"THEN t.`{c.name}` ELSE s.`{c.name}` END" for c in rest}
        update["_cdc_seq"] = "s._cdc_seq"
        update["_cdc_deleted"] = "s._cdc_deleted"
        insert = {f"`{c.name}`": f"s.`{c.name}`" for c in cols}
        insert["_cdc_seq"] = "s._cdc_seq"
        insert["_cdc_deleted"] = "s._cdc_deleted"
        bt = time.perf_counter()
        (DeltaTable.forPath(spark, table).alias("t")
            .merge(latest.alias("s"), f"t.`{key}` = s.`{key}`")
            .whenMatchedUpdate(condition="s._cdc_seq > t._cdc_seq", set=update)
            .whenNotMatchedInsert(values=insert)
            .execute())
        state["batches"] += 1
        pc.log(PEER, f"batch {batch_id}: merged in {time.perf_counter() - bt:.1f}s")

    if os.environ.get("CDCAPPLY_SPARK_PROFILE"):  # time the stages of the first batch file, no stream
        first = sorted(os.listdir(chunks))[0]
        b = spark.read.text(os.path.join(chunks, first))
        for i in range(2):
            t = time.perf_counter()
            n = reduce_batch(b).count()
            pc.log(PEER, f"profile: parse+reduce of {first} to {n} keys: {time.perf_counter() - t:.1f}s")
        for i in range(2):
            t = time.perf_counter()
            apply_changes(b, -1 - i)
            pc.log(PEER, f"profile: whole batch function: {time.perf_counter() - t:.1f}s")
        spark.stop()
        return

    jvm = spark.sparkContext._gateway.proc.pid  # the JVM does the work; Python only plans
    start, cpu0, jcpu0 = time.perf_counter(), time.process_time(), pc.proc_cpu_seconds(jvm)
    query = (
        spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(chunks)
        .writeStream.foreachBatch(apply_changes)
        .option("checkpointLocation", os.path.join(work, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0 + pc.proc_cpu_seconds(jvm) - jcpu0
    if query.exception() is not None:
        raise SystemExit(f"streaming query failed: {query.exception()}")
    version = DeltaTable.forPath(spark, table).history(1).select("version").first()[0]
    pc.emit({
        "peer": PEER, "events": nlines, "seconds": round(seconds, 3), "batches": state["batches"],
        "cpu_seconds": round(cpu, 3),
        "startup_seconds": round(startup_seconds, 3), "split_seconds": round(split_seconds, 3),
        "table_version": version,
        "versions": {"pyspark": pyspark.__version__, "delta": delta_jar, "python": sys.version.split()[0]},
    })
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
