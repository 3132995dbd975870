package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// demoMarker marks a folder the demo created, so that a re-run deletes
// only what an earlier run made.
const demoMarker = ".cdcapply-demo"

// The simulated source: one Debezium topic with three partitions.
const (
	demoPipeline = "demo"
	demoTopic    = "demo.public.customers"
	demoParts    = 3
	demoBatches  = 14
)

// customer is one row of the demo table.
type customer struct {
	id      int64
	name    string
	region  string
	balance int64 // cents: decimal(12,2)
	updated int64 // microseconds since the epoch
	deleted bool
	seq     int64 // the source sequence of the change that wrote the row
}

// demoSchema is the demo table: a soft-delete flag and the source sequence,
// as cdcapply's tables will carry them, partitioned by region.
func demoSchema() delta.StructType {
	f := func(name string, t delta.DataType, nullable bool) delta.StructField {
		return delta.StructField{Name: name, Type: t, Nullable: nullable, Metadata: map[string]any{}}
	}
	return delta.StructType{Fields: []delta.StructField{
		f("id", delta.Long, false),
		f("name", delta.String, true),
		f("region", delta.String, true),
		f("balance", delta.DecimalType{Precision: 12, Scale: 2}, true),
		f("updated_at", delta.Timestamp, true),
		f("deleted", delta.Boolean, false),
		f("source_seq", delta.Long, false),
	}}
}

var demoRegions = []string{"emea", "amer", "apac"}

// demo holds the run's table and the oracle of what it must contain.
type demo struct {
	ctx    context.Context
	st     storage.Storage
	table  *delta.Table
	snap   *delta.Snapshot
	layout datafile.Layout
	// rows is every key's current row; files maps a live data file to the
	// keys it holds; fileOf maps a key to its file.
	rows   map[int64]customer
	files  map[string][]int64
	fileOf map[int64]string
	// offsets is the next offset per simulated Kafka partition.
	offsets                   [demoParts]int64
	inserts, updates, deletes int
	removes, commits, nextID  int
	clock                     time.Time
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("delta-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// Inside ./cdcapply-demo (git-ignored) beside the streaming demo's
	// tables, in a folder of its own so that neither wipes the other.
	dir := fs.String("dir", filepath.Join("cdcapply-demo", "delta-core"), "folder for the demo table (re-created on every run)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	root := filepath.Join(*dir, "customers")
	if err := resetDemoDir(*dir); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "cdcapply delta-demo: a local end-to-end run of the Delta Lake core alone.")
	fmt.Fprintln(stdout, "(`cdcapply demo` runs the whole pipeline, Debezium topics from Kafka into Delta.)")
	fmt.Fprintln(stdout)

	st := storage.NewLocal(root)
	d := &demo{ctx: ctx, st: st, table: delta.Open(st), rows: map[int64]customer{},
		files: map[string][]int64{}, fileOf: map[int64]string{}, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := d.create(); err != nil {
		return err
	}
	for b := 1; b <= demoBatches; b++ {
		if err := d.batch(b); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote %s\n", root)
	fmt.Fprintf(stdout, "  %d commits: %d inserts, %d updates, %d soft deletes from %d simulated Kafka partitions of %s\n",
		d.commits, d.inserts, d.updates, d.deletes, demoParts, demoTopic)
	fmt.Fprintf(stdout, "  updates and deletes rewrite the files holding their keys: %d files removed\n", d.removes)
	return d.verify(stdout, root)
}

// resetDemoDir empties dir if an earlier demo made it, and creates it with
// the marker. A folder the demo did not make is left alone.
func resetDemoDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, demoMarker)); err != nil {
			entries, _ := os.ReadDir(dir)
			if len(entries) > 0 {
				return fmt.Errorf("reset demo folder: %s exists and was not made by the demo; choose another with -dir", dir)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("reset demo folder: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create demo folder: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, demoMarker), []byte("made by `cdcapply delta-demo`; its next run deletes this folder\n"), 0o644); err != nil {
		return fmt.Errorf("create demo folder: %w", err)
	}
	return nil
}

func (d *demo) create() error {
	schema := demoSchema()
	ss, err := delta.SchemaString(schema)
	if err != nil {
		return fmt.Errorf("create demo table: %w", err)
	}
	created := d.clock.UnixMilli()
	meta := delta.Metadata{ID: uuid.NewString(), Name: "customers", Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString: ss, PartitionColumns: []string{"region"}, CreatedTime: &created, Configuration: map[string]string{}}
	if d.layout, err = datafile.LayoutOf(&meta); err != nil {
		return fmt.Errorf("create demo table: %w", err)
	}
	tx := d.table.Begin(nil)
	tx.SetProtocol(delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
	tx.SetMetadata(meta)
	c, err := tx.Commit(d.ctx, "CREATE TABLE", map[string]any{"partitionBy": `["region"]`})
	if err != nil {
		return fmt.Errorf("create demo table: %w", err)
	}
	d.snap = c.Snapshot
	d.commits++
	return nil
}

// batch simulates one micro-batch: each partition delivers a few changes
// (new customers, and from the third batch on updates and deletes of
// existing ones), the changed files are rewritten, and everything commits
// at once with the partitions' next offsets as txn actions.
func (d *demo) batch(b int) error {
	d.clock = d.clock.Add(time.Minute)
	changed := map[int64]customer{}
	ranges := map[checkpoint.TopicPartition]checkpoint.Range{}
	for p := 0; p < demoParts; p++ {
		tp := checkpoint.TopicPartition{Topic: demoTopic, Partition: int32(p)}
		from := d.offsets[p]
		for k := 0; k < 2+p; k++ {
			seq := int64(b*100 + p*10 + k)
			d.clock = d.clock.Add(time.Second)
			if existing := d.pickExisting(b, p, k); b >= 3 && existing >= 0 {
				row := d.current(existing, changed)
				row.seq, row.updated = seq, d.clock.UnixMicro()
				if (b+p+k)%4 == 0 && !row.deleted {
					// A soft delete: the row stays, flagged, with the
					// delete's sequence.
					row.deleted = true
					d.deletes++
				} else {
					row.balance += int64(1000*b + p)
					row.deleted = false
					d.updates++
				}
				changed[existing] = row
			} else {
				id := int64(d.nextID)
				d.nextID++
				changed[id] = customer{id: id, name: fmt.Sprintf("customer %d", id), region: demoRegions[int(id)%len(demoRegions)],
					balance: id * 1234, updated: d.clock.UnixMicro(), seq: seq}
				d.inserts++
			}
			d.offsets[p]++
		}
		ranges[tp] = checkpoint.Range{From: from, Next: d.offsets[p]}
	}
	return d.commit(b, changed, ranges)
}

// pickExisting chooses an existing key to change, or -1 for an insert.
func (d *demo) pickExisting(b, p, k int) int64 {
	if d.nextID == 0 || (b+p+k)%3 == 0 {
		return -1
	}
	return int64((b*7 + p*5 + k*3) % d.nextID)
}

func (d *demo) current(id int64, changed map[int64]customer) customer {
	if r, ok := changed[id]; ok {
		return r
	}
	return d.rows[id]
}

// commit rewrites every file holding a changed key (copy-on-write) and
// writes the new keys per region, then commits adds, removes and txns.
func (d *demo) commit(b int, changed map[int64]customer, ranges map[checkpoint.TopicPartition]checkpoint.Range) error {
	next := map[int64]customer{}
	for id, r := range d.rows {
		next[id] = r
	}
	for id, r := range changed {
		next[id] = r
	}
	// Files to rewrite: those holding a changed key.
	rewrite := map[string]bool{}
	for id := range changed {
		if p, ok := d.fileOf[id]; ok {
			rewrite[p] = true
		}
	}
	byRegion := map[string][]int64{}
	tx := d.table.Begin(d.snap)
	for _, p := range sortedKeys(rewrite) {
		add, ok := tx.ReadFile(delta.FileKey{Path: p})
		if !ok {
			return fmt.Errorf("commit batch %d: file %s is not live", b, p)
		}
		tx.RemoveFile(add, true)
		d.removes++
		for _, id := range d.files[p] {
			byRegion[next[id].region] = append(byRegion[next[id].region], id)
		}
	}
	for id := range changed {
		if _, ok := d.fileOf[id]; !ok {
			byRegion[next[id].region] = append(byRegion[next[id].region], id)
		}
	}
	newFiles := map[string][]int64{}
	for _, region := range sortedKeys(byRegion) {
		ids := byRegion[region]
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		add, err := d.writeFile(next, region, ids)
		if err != nil {
			return fmt.Errorf("commit batch %d: %w", b, err)
		}
		tx.Add(add)
		newFiles[add.Path] = ids
	}
	for _, a := range checkpoint.Txns(demoPipeline, ranges, d.clock) {
		tx.SetTxn(a.Txn.AppID, a.Txn.Version)
	}
	c, err := tx.Commit(d.ctx, "MERGE", map[string]any{"batch": b})
	if err != nil {
		return fmt.Errorf("commit batch %d: %w", b, err)
	}
	if c.CheckpointErr != nil {
		return fmt.Errorf("checkpoint after batch %d: %w", b, c.CheckpointErr)
	}
	d.snap = c.Snapshot
	d.commits++
	d.rows = next
	for p := range rewrite {
		delete(d.files, p)
	}
	for p, ids := range newFiles {
		d.files[p] = ids
		for _, id := range ids {
			d.fileOf[id] = p
		}
	}
	return nil
}

// writeFile writes the rows of ids, all of one region, as a new Parquet
// data file. The record holds the data columns only: region is the
// partition column and lives in the add action's partitionValues.
func (d *demo) writeFile(rows map[int64]customer, region string, ids []int64) (*delta.Add, error) {
	var data delta.StructType
	for _, f := range d.layout.Schema.Fields {
		if f.Name != "region" {
			data.Fields = append(data.Fields, f)
		}
	}
	as, err := datafile.ArrowSchema(data)
	if err != nil {
		return nil, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for _, id := range ids {
		r := rows[id]
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append(r.name)
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(r.balance))
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.updated))
		b.Field(4).(*array.BooleanBuilder).Append(r.deleted)
		b.Field(5).(*array.Int64Builder).Append(r.seq)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	return datafile.Write(d.ctx, d.st, d.layout, rec, map[string]*string{"region": &region})
}

// verify reopens the table from disk, reads every row back through log
// replay and the data file reader, and checks it against the oracle.
func (d *demo) verify(stdout io.Writer, root string) error {
	snap, err := delta.Open(storage.NewLocal(root)).Snapshot(d.ctx)
	if err != nil {
		return fmt.Errorf("read back demo table: %w", err)
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return fmt.Errorf("read back demo table: %w", err)
	}
	got := map[int64]customer{}
	for _, add := range snap.Files() {
		rec, err := datafile.Read(d.ctx, d.st, layout, add)
		if err != nil {
			return fmt.Errorf("read back demo table: %w", err)
		}
		ids := rec.Column(0).(*array.Int64)
		deleted := rec.Column(5).(*array.Boolean)
		seqs := rec.Column(6).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			id := ids.Value(i)
			if _, dup := got[id]; dup {
				rec.Release()
				return fmt.Errorf("check demo table: key %d is in two live files", id)
			}
			got[id] = customer{id: id, deleted: deleted.Value(i), seq: seqs.Value(i)}
		}
		rec.Release()
	}
	softDeleted := 0
	for _, r := range got {
		if r.deleted {
			softDeleted++
		}
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "read back from disk (log replay + Parquet reader):")
	fmt.Fprintf(stdout, "  version      %d\n", snap.Version)
	if cv := snap.CheckpointVersion(); cv >= 0 {
		fmt.Fprintf(stdout, "  checkpoint   %d (replay started from it, then %d JSON commits)\n", cv, snap.Version-cv)
	} else {
		fmt.Fprintln(stdout, "  checkpoint   none")
	}
	fmt.Fprintf(stdout, "  live files   %d\n", snap.NumFiles())
	fmt.Fprintf(stdout, "  rows         %d (%d soft-deleted)\n", len(got), softDeleted)
	fmt.Fprintln(stdout, "  positions    (txn actions, where a restart resumes each partition)")
	pos := checkpoint.Restore(snap, demoPipeline)
	for _, tp := range pos.Sorted() {
		next, _ := pos.Next(tp)
		fmt.Fprintf(stdout, "    %-26s next offset %d  (appId %s)\n", tp, next, checkpoint.AppID(demoPipeline, tp))
	}

	// The read-back must equal what the demo wrote.
	if snap.Version != int64(d.commits-1) {
		return fmt.Errorf("check demo table: version %d after %d commits", snap.Version, d.commits)
	}
	if len(got) != len(d.rows) {
		return fmt.Errorf("check demo table: read %d rows, wrote %d", len(got), len(d.rows))
	}
	for id, want := range d.rows {
		r, ok := got[id]
		if !ok || r.deleted != want.deleted || r.seq != want.seq {
			return fmt.Errorf("check demo table: key %d read as %+v, wrote %+v", id, r, want)
		}
	}
	for p := 0; p < demoParts; p++ {
		tp := checkpoint.TopicPartition{Topic: demoTopic, Partition: int32(p)}
		if next, ok := pos.Next(tp); !ok || next != d.offsets[p] {
			return fmt.Errorf("check demo table: position of %s read as %d, wrote %d", tp, next, d.offsets[p])
		}
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "check: rows, soft deletes, sequences and positions read back equal what was written.")
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
