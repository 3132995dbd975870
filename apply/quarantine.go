package apply

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Rejected is a record that cannot be applied, with why.
type Rejected struct {
	Record debezium.Record
	Reason string
	Detail string
}

// quarantineSchema is the layout of every quarantine table: the raw record
// as Kafka had it, where it was, and why it was rejected.
var quarantineSchema = delta.StructType{Fields: []delta.StructField{
	{Name: "topic", Type: delta.String, Nullable: false},
	{Name: "partition", Type: delta.Integer, Nullable: false},
	{Name: "offset", Type: delta.Long, Nullable: false},
	{Name: "key", Type: delta.Binary, Nullable: true},
	{Name: "value", Type: delta.Binary, Nullable: true},
	{Name: "headers", Type: delta.String, Nullable: true},
	{Name: "record_timestamp", Type: delta.Timestamp, Nullable: true},
	{Name: "reason", Type: delta.String, Nullable: false},
	{Name: "detail", Type: delta.String, Nullable: true},
	{Name: "quarantined_at", Type: delta.Timestamp, Nullable: false},
}}

// Quarantine is a table's quarantine: a Delta table of rejected records,
// appended with a txn per partition so that re-reading the same records
// after a crash (before the main commit moved past them) adds nothing twice.
type Quarantine struct {
	name     string
	pipeline string
	store    storage.Storage
	table    *delta.Table
	clock    func() time.Time
	snap     *delta.Snapshot
}

// NewQuarantine returns the quarantine of table name at store.
func NewQuarantine(name, pipeline string, store storage.Storage, clock func() time.Time) *Quarantine {
	if clock == nil {
		clock = time.Now
	}
	return &Quarantine{name: name, pipeline: pipeline, store: store, table: delta.Open(store), clock: clock}
}

// Open loads the quarantine table's snapshot (none yet is fine).
func (q *Quarantine) Open(ctx context.Context) error {
	snap, err := q.table.Snapshot(ctx)
	switch {
	case errors.Is(err, delta.ErrNoTable):
		q.snap = nil
	case err != nil:
		return fmt.Errorf("open quarantine of table %s: %w", q.name, err)
	default:
		q.snap = snap
	}
	return nil
}

// Written reports the next offset per partition already quarantined.
func (q *Quarantine) Written() checkpoint.Positions { return checkpoint.Restore(q.snap, q.pipeline) }

// Write appends the rejected records not yet in the quarantine, in one commit.
func (q *Quarantine) Write(ctx context.Context, recs []Rejected) error {
	done := q.Written()
	var todo []Rejected
	next := map[checkpoint.TopicPartition]int64{}
	for _, r := range recs {
		tp := checkpoint.TopicPartition{Topic: r.Record.Topic, Partition: r.Record.Partition}
		if done.Applied(tp, r.Record.Offset) {
			continue
		}
		todo = append(todo, r)
		if r.Record.Offset+1 > next[tp] {
			next[tp] = r.Record.Offset + 1
		}
	}
	if len(todo) == 0 {
		return nil
	}
	sort.Slice(todo, func(i, j int) bool {
		a, b := todo[i].Record, todo[j].Record
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	rec, err := q.arrow(todo)
	if err != nil {
		return fmt.Errorf("write quarantine of table %s: %w", q.name, err)
	}
	defer rec.Release()
	layout := datafile.Layout{Schema: quarantineSchema, PartitionColumns: []string{}, Mapping: datafile.MappingNone, NumIndexedCols: 3}
	add, err := datafile.Write(ctx, q.store, layout, rec, map[string]*string{})
	if err != nil {
		return fmt.Errorf("write quarantine of table %s: %w", q.name, err)
	}
	tx := q.table.Begin(q.snap)
	if q.snap == nil {
		schemaString, err := delta.SchemaString(quarantineSchema)
		if err != nil {
			return err
		}
		created := q.clock().UnixMilli()
		tx.SetProtocol(delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
		tx.SetMetadata(delta.Metadata{ID: uuid.NewString(), Name: q.name + "_quarantine", Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
			SchemaString: schemaString, PartitionColumns: []string{}, CreatedTime: &created, Configuration: map[string]string{}})
	}
	for tp, v := range next {
		tx.ReadTxn(checkpoint.AppID(q.pipeline, tp))
		tx.SetTxn(checkpoint.AppID(q.pipeline, tp), v)
	}
	tx.Add(add)
	reasons := map[string]int{}
	for _, r := range todo {
		reasons[r.Reason]++
	}
	c, err := tx.Commit(ctx, "WRITE", map[string]any{"mode": "Append", "table": q.name, "records": len(todo), "reasons": reasons})
	if err != nil {
		return fmt.Errorf("commit quarantine of table %s: %w", q.name, err)
	}
	q.snap = c.Snapshot
	return nil
}

func (q *Quarantine) arrow(recs []Rejected) (arrow.RecordBatch, error) {
	sch, err := datafile.ArrowSchema(quarantineSchema)
	if err != nil {
		return nil, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	defer b.Release()
	now := arrow.Timestamp(q.clock().UnixMicro())
	for _, r := range recs {
		b.Field(0).(*array.StringBuilder).Append(r.Record.Topic)
		b.Field(1).(*array.Int32Builder).Append(r.Record.Partition)
		b.Field(2).(*array.Int64Builder).Append(r.Record.Offset)
		appendBytes(b.Field(3).(*array.BinaryBuilder), r.Record.Key)
		appendBytes(b.Field(4).(*array.BinaryBuilder), r.Record.Value)
		if len(r.Record.Headers) == 0 {
			b.Field(5).AppendNull()
		} else {
			hs := make([]map[string]string, len(r.Record.Headers))
			for i, h := range r.Record.Headers {
				hs[i] = map[string]string{"key": h.Key, "value_b64": base64.StdEncoding.EncodeToString(h.Value)}
			}
			j, _ := json.Marshal(hs)
			b.Field(5).(*array.StringBuilder).Append(string(j))
		}
		if r.Record.Timestamp.IsZero() {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(r.Record.Timestamp.UnixMicro()))
		}
		b.Field(7).(*array.StringBuilder).Append(r.Reason)
		b.Field(8).(*array.StringBuilder).Append(r.Detail)
		b.Field(9).(*array.TimestampBuilder).Append(now)
	}
	return b.NewRecordBatch(), nil
}

func appendBytes(b *array.BinaryBuilder, v []byte) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.Append(v)
}
