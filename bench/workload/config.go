package workload

import (
	"errors"
	"fmt"
	"time"
)

// Config describes a workload. Zero values of sizes, names and windows
// take the defaults of Default; zero fractions turn a feature off.
type Config struct {
	// Seed makes the stream reproducible: equal configs give equal
	// records, byte for byte.
	Seed uint64

	// Server is Debezium's topic.prefix; the table's topic is
	// Server.Schema.Table.
	Server, Database, Schema, Table string
	// Partitions is the topic's partition count; a record goes to the
	// partition of its key's hash, as Kafka's default partitioner would
	// put it (so one key stays in one partition).
	Partitions int32

	// Keys is the key space: ids 1..Keys. New rows take the next unused id
	// (a serial primary key); when none is left an insert revives a
	// deleted key.
	Keys int64
	// SnapshotKeys rows (ids 1..SnapshotKeys) are read by the connector's
	// initial snapshot (op r, sequence [null, lsn]) before streaming.
	SnapshotKeys int64
	// Events is the number of streamed row changes after the snapshot.
	Events int64

	// Columns is the row width in columns, at least 3: the bigint key id,
	// a cycle of integer, bigint, text, timestamp, numeric, boolean and text
	// columns, and last a TOASTed text column doc.
	Columns int
	// StringWidth and DocWidth are the lengths of text values and of doc.
	StringWidth, DocWidth int
	// NullPercent is the chance, in percent, of a non-key value being NULL.
	NullPercent int

	// Insert, Update and Delete weigh the operation mix (normalised);
	// updates and deletes fall back to inserts while no row is live.
	Insert, Update, Delete float64
	// Revival is the fraction of inserts that re-insert a deleted key
	// even while unused ids remain.
	Revival float64
	// UnknownDeletes is the fraction of deletes that hit a key the source
	// never had (ids above Keys): the table still gets a tombstone.
	UnknownDeletes float64
	// HotKeys ids (1..HotKeys) receive HotFraction of updates and deletes:
	// a skewed key distribution.
	HotKeys     int64
	HotFraction float64
	// DocChange is the fraction of updates that change doc. An update that
	// leaves a non-NULL doc unchanged sends the unavailable placeholder
	// (PostgreSQL does not log an unchanged TOASTed value).
	DocChange float64
	// MaxTxSize bounds the changes per source transaction (uniform 1..).
	MaxTxSize int

	// OutOfOrder is the fraction of streamed changes delivered up to
	// OutOfOrderWindow records later than their place in the source order,
	// as with several producers; Late is the fraction delivered LateDelay
	// records (on average) later, past flush boundaries. Either may arrive
	// after a newer change of its key; see design-notes/workload.md for
	// the rule that keeps the final table independent of batching.
	OutOfOrder       float64
	OutOfOrderWindow int
	Late             float64
	LateDelay        int

	// Duplicates is the fraction of changes delivered twice in a row (a
	// producer retry).
	Duplicates float64
	// Replays is the chance, per change, that the last 1..ReplayLength
	// records are delivered again (a connector restarting from an older
	// offset).
	Replays      float64
	ReplayLength int

	// KafkaTombstones sends a null-valued record after every delete, as
	// Debezium's tombstones.on.delete does.
	KafkaTombstones bool
	// HeartbeatEvery sends a heartbeat after that many records (0: none),
	// to HeartbeatTopic (default __debezium-heartbeat.<Server>; set it to
	// the table's topic to have the table's consumer skip them).
	HeartbeatEvery int
	HeartbeatTopic string

	// StartLSN is the WAL position the stream starts after.
	StartLSN uint64
	// StartTime is the source commit time of the first transaction; each
	// transaction commits TxInterval after the previous one.
	StartTime  time.Time
	TxInterval time.Duration
	// Clock, when set, stamps source commit times from it instead (for
	// freshness measurements); the records then depend on when they were
	// generated, the oracle does not.
	Clock func() time.Time `json:"-"`
}

// Default is the reference workload: 10 columns, 80% updates, 10% inserts,
// 10% deletes over 100k keys, with a little of every irregularity the
// engine must survive.
func Default() Config {
	return Config{
		Seed:   1,
		Server: "bench", Database: "shop", Schema: "public", Table: "orders",
		Partitions: 4,
		Keys:       100_000, SnapshotKeys: 10_000, Events: 100_000,
		Columns: 10, StringWidth: 24, DocWidth: 256, NullPercent: 5,
		Insert: 0.1, Update: 0.8, Delete: 0.1,
		Revival: 0.05, UnknownDeletes: 0.02,
		HotKeys: 100, HotFraction: 0.2,
		DocChange: 0.3, MaxTxSize: 4,
		OutOfOrder: 0.01, OutOfOrderWindow: 64,
		Late: 0.001, LateDelay: 5000,
		Duplicates: 0.01, Replays: 0.0005, ReplayLength: 50,
		KafkaTombstones: true, HeartbeatEvery: 10_000,
		StartLSN:  0x1_6B37_4800,
		StartTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), TxInterval: time.Millisecond,
	}
}

// withDefaults fills zero sizes and names from Default and checks ranges.
func (c Config) withDefaults() (Config, error) {
	d := Default()
	setStr := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setStr(&c.Server, d.Server)
	setStr(&c.Database, d.Database)
	setStr(&c.Schema, d.Schema)
	setStr(&c.Table, d.Table)
	setStr(&c.HeartbeatTopic, "__debezium-heartbeat."+c.Server)
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.Keys == 0 {
		c.Keys = d.Keys
	}
	if c.Columns == 0 {
		c.Columns = d.Columns
	}
	if c.StringWidth == 0 {
		c.StringWidth = d.StringWidth
	}
	if c.DocWidth == 0 {
		c.DocWidth = d.DocWidth
	}
	if c.MaxTxSize == 0 {
		c.MaxTxSize = 1
	}
	if c.OutOfOrderWindow == 0 {
		c.OutOfOrderWindow = d.OutOfOrderWindow
	}
	if c.LateDelay == 0 {
		c.LateDelay = d.LateDelay
	}
	if c.ReplayLength == 0 {
		c.ReplayLength = d.ReplayLength
	}
	if c.StartLSN == 0 {
		c.StartLSN = d.StartLSN
	}
	if c.StartTime.IsZero() {
		c.StartTime = d.StartTime
	}
	if c.TxInterval == 0 {
		c.TxInterval = d.TxInterval
	}
	if c.Insert == 0 && c.Update == 0 && c.Delete == 0 {
		c.Insert = 1
	}
	var errs []error
	if c.Columns < 3 {
		errs = append(errs, fmt.Errorf("columns %d: want at least 3 (key, one value, doc)", c.Columns))
	}
	if c.Partitions < 0 || c.Keys < 0 || c.SnapshotKeys < 0 || c.Events < 0 || c.HotKeys < 0 {
		errs = append(errs, errors.New("partitions, keys, snapshot keys, events and hot keys must not be negative"))
	}
	if c.SnapshotKeys > c.Keys {
		errs = append(errs, fmt.Errorf("snapshot keys %d exceed keys %d", c.SnapshotKeys, c.Keys))
	}
	if c.NullPercent < 0 || c.NullPercent > 100 {
		errs = append(errs, fmt.Errorf("null percent %d: want 0..100", c.NullPercent))
	}
	for name, f := range map[string]float64{"insert": c.Insert, "update": c.Update, "delete": c.Delete,
		"revival": c.Revival, "unknown deletes": c.UnknownDeletes, "hot fraction": c.HotFraction,
		"doc change": c.DocChange, "out of order": c.OutOfOrder, "late": c.Late,
		"duplicates": c.Duplicates, "replays": c.Replays} {
		if f < 0 || (f > 1 && name != "insert" && name != "update" && name != "delete") {
			errs = append(errs, fmt.Errorf("%s %v: want a fraction in [0, 1]", name, f))
		}
	}
	if c.HeartbeatEvery < 0 {
		errs = append(errs, fmt.Errorf("heartbeat every %d: must not be negative", c.HeartbeatEvery))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("check workload config: %w", err)
	}
	return c, nil
}

// Topic is the table's Kafka topic.
func (c Config) Topic() string { return c.Server + "." + c.Schema + "." + c.Table }
