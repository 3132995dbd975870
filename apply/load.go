package apply

import (
	"context"
	"fmt"

	"github.com/cdcapply/cdcapply/debezium"
)

// Load applies records to one of the pipeline's tables directly, without
// Kafka, as one commit that moves no Kafka positions: a table seeded this
// way is read from its topics' start offsets by a later Run, exactly as
// an empty table is. It is for seeding a table with a snapshot taken
// elsewhere (the bench harness's -prefill writes a 10M-row snapshot this
// way instead of through a broker). Records go through the same decoder,
// layout and merge as Run's, so the rows are the ones Run would write.
//
// Load is called before Run, from one goroutine. It is strict: a record
// that does not decode, a truncate, or a change the layout cannot take is
// an error naming the table, topic, partition and offset, and nothing of
// the call is committed. Heartbeats and Kafka tombstones are skipped.
func (e *Engine) Load(ctx context.Context, table string, recs []debezium.Record) (*Result, error) {
	var t *tableRun
	for _, x := range e.tables {
		if x.cfg.Name == table {
			t = x
		}
	}
	if t == nil {
		return nil, fmt.Errorf("load: no table %q in pipeline %s", table, e.cfg.Pipeline.ID)
	}
	if !t.loadOpened {
		if err := t.applier.Open(ctx); err != nil {
			return nil, err
		}
		if err := e.typeSchemaless(t); err != nil {
			return nil, err
		}
		t.loadOpened = true
	}
	t.buf.reset()
	defer t.buf.reset()
	b := &Batch{Read: len(recs)}
	for i := range recs {
		r := &recs[i]
		where := func(err error) error {
			return fmt.Errorf("load table %s: topic %s partition %d offset %d: %w", t.cfg.Name, r.Topic, r.Partition, r.Offset, err)
		}
		ch, err := t.decoder.Decode(ctx, r)
		if err != nil {
			return nil, where(err)
		}
		if ch.Class != debezium.ClassChange {
			b.Skipped++
			continue
		}
		if ch.Op == debezium.OpTruncate {
			return nil, where(fmt.Errorf("a truncate cannot be loaded"))
		}
		if err := e.ensureLayout(ctx, t, &ch); err != nil {
			return nil, where(err)
		}
		c, err := t.applier.Layout().Project(&ch)
		if err != nil {
			return nil, where(err)
		}
		t.buf.changes = append(t.buf.changes, c)
	}
	if t.applier.Layout() == nil {
		return nil, fmt.Errorf("load table %s: %d records and no change among them: nothing to create the table from", t.cfg.Name, len(recs))
	}
	if len(t.buf.changes) == 0 {
		return &Result{Version: t.applier.Snapshot().Version}, nil
	}
	b.Changes = t.buf.changes
	res, err := t.applier.Apply(ctx, b)
	e.metrics.stageEnded(t.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("load table %s: %w", t.cfg.Name, err)
	}
	// A load is a bulk step its caller may follow with anything, exiting
	// included: its checkpoint, if it started one, is done when it returns.
	t.applier.table.WaitCheckpoints()
	t.takeCheckpoint(res)
	return res, nil
}
