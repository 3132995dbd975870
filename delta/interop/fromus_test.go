package interop_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// ourTable is a table the test writes through the delta packages, with the
// oracle of what it must hold.
type ourTable struct {
	t      *testing.T
	ctx    context.Context
	root   string
	st     storage.Storage
	table  *delta.Table
	snap   *delta.Snapshot
	layout datafile.Layout
	// live maps each live add path to the oracle rows in that file.
	live map[string][]oracleRow
	// txns is the latest version set per appId.
	txns   map[string]int64
	nextID int64
	// history is live and txns as of each committed version.
	history []oracleState
}

// oracleState is the oracle at one table version.
type oracleState struct {
	live map[string][]oracleRow
	txns map[string]int64
}

// writeFile writes rows (all in one partition) as a new data file.
func (o *ourTable) writeFile(rows []oracleRow) fileRows {
	o.t.Helper()
	rec, err := recordOf(o.layout.Schema, o.layout.PartitionColumns, rows)
	if err != nil {
		o.t.Fatalf("build record: %v", err)
	}
	defer rec.Release()
	pv, err := partitionValuesOf(o.layout.Schema, o.layout.PartitionColumns, rows[0])
	if err != nil {
		o.t.Fatal(err)
	}
	add, err := datafile.Write(o.ctx, o.st, o.layout, rec, pv)
	if err != nil {
		o.t.Fatalf("write data file: %v", err)
	}
	return fileRows{add, rows}
}

// fileRows is a written data file and the oracle rows in it.
type fileRows struct {
	add  *delta.Add
	rows []oracleRow
}

func (o *ourTable) newRows(n int, gen int, region, bucket any) []oracleRow {
	rows := make([]oracleRow, n)
	for i := range rows {
		rows[i] = makeRow(o.nextID, gen, region, bucket)
		o.nextID++
	}
	return rows
}

// liveFile returns the k-th live file (mod their count) in path order.
func (o *ourTable) liveFile(k int) *delta.Add {
	files := o.snap.Files()
	return files[k%len(files)]
}

// commit commits tx and moves the oracle along with it.
func (o *ourTable) commit(tx *delta.Transaction, adds []fileRows, removed []*delta.Add, txns map[string]int64) {
	o.t.Helper()
	for _, f := range adds {
		tx.Add(f.add)
	}
	for _, r := range removed {
		tx.RemoveFile(r, true)
	}
	for app, v := range txns {
		tx.SetTxn(app, v)
	}
	c, err := tx.Commit(o.ctx, "WRITE", map[string]any{"mode": "Append"})
	if err != nil {
		o.t.Fatalf("commit: %v", err)
	}
	if c.CheckpointErr != nil {
		o.t.Fatalf("checkpoint after commit %d: %v", c.Version, c.CheckpointErr)
	}
	o.snap = c.Snapshot
	for _, r := range removed {
		delete(o.live, r.Path)
	}
	for _, f := range adds {
		o.live[f.add.Path] = f.rows
	}
	for app, v := range txns {
		o.txns[app] = v
	}
	if int64(len(o.history)) != c.Version {
		o.t.Fatalf("commit landed at version %d, the oracle expected %d", c.Version, len(o.history))
	}
	o.history = append(o.history, oracleState{live: maps.Clone(o.live), txns: maps.Clone(o.txns)})
}

// buildOurTable writes a table through 15 commits: a create, appends in
// rotating partitions, whole-file deletes (remove), copy-on-write updates
// (remove + add of the rewritten rows), txn actions for several appIds
// (two in cdcapply's own Kafka-position form) and, at version 10,
// the automatic log checkpoint.
func buildOurTable(t *testing.T, partitioned bool) *ourTable {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root)
	o := &ourTable{t: t, ctx: ctx, root: root, st: st, table: delta.Open(st),
		live: map[string][]oracleRow{}, txns: map[string]int64{}}

	schema := allTypes()
	ss, err := delta.SchemaString(schema)
	if err != nil {
		t.Fatal(err)
	}
	// A flat table leaves PartitionColumns nil, as a caller naturally
	// would: the commit must still write [] (delta-rs refuses null).
	var parts []string
	if partitioned {
		parts = []string{"region", "bucket"}
	}
	created := time.Now().UnixMilli()
	meta := delta.Metadata{ID: uuid.NewString(), Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString: ss, PartitionColumns: parts, CreatedTime: &created, Configuration: map[string]string{}}
	if o.layout, err = datafile.LayoutOf(&meta); err != nil {
		t.Fatal(err)
	}
	partition := func(k int) (any, any) {
		if !partitioned {
			// A flat table still has region and bucket columns; vary them
			// per row so nulls and escapes land in data files too.
			return regions[(int(o.nextID)+k)%len(regions)], buckets[(int(o.nextID)+k)%len(buckets)]
		}
		return regions[k%len(regions)], buckets[k%len(buckets)]
	}

	apps := []string{
		checkpoint.AppID("interop", checkpoint.TopicPartition{Topic: "db.public.orders", Partition: 0}),
		checkpoint.AppID("interop", checkpoint.TopicPartition{Topic: "db.public.orders", Partition: 1}),
		"another-writer",
	}

	// v0: create with two files.
	tx := o.table.Begin(nil)
	tx.SetProtocol(delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{delta.FeatureTimestampNTZ}, WriterFeatures: []string{delta.FeatureTimestampNTZ}})
	tx.SetMetadata(meta)
	var adds []fileRows
	for k := 0; k < 2; k++ {
		r, b := partition(k)
		adds = append(adds, o.writeFile(o.newRows(5, 0, r, b)))
	}
	o.commit(tx, adds, nil, map[string]int64{apps[0]: 5})

	for v := 1; v <= 14; v++ {
		tx := o.table.Begin(o.snap)
		var removed []*delta.Add
		r, b := partition(v)
		adds := []fileRows{o.writeFile(o.newRows(4, 0, r, b))}
		switch {
		case v%4 == 0:
			// Copy-on-write update: rewrite one file with every row at a
			// new generation, dropping its first row (a hard delete).
			old := o.liveFile(v)
			var upd []oracleRow
			for _, row := range o.live[old.Path][1:] {
				upd = append(upd, makeRow(row[0].(int64), v, row[1], row[2]))
			}
			if len(upd) > 0 {
				adds = append(adds, o.writeFile(upd))
			}
			removed = append(removed, old)
		case v%3 == 0:
			// Delete a whole file.
			removed = append(removed, o.liveFile(v))
		}
		txns := map[string]int64{apps[v%len(apps)]: int64(100 * v)}
		if v%5 == 0 {
			txns[apps[(v+1)%len(apps)]] = int64(100*v + 1)
		}
		o.commit(tx, adds, removed, txns)
	}
	return o
}

// TestOurTablesReadByDeltalake writes tables with every primitive type,
// partitioned and not, through many commits with removes, txn actions and
// a checkpoint, and checks that delta-rs reads exactly the oracle's rows,
// live files and app transaction versions, at the latest version and at
// every earlier one (time travel), and that our own reader agrees.
func TestOurTablesReadByDeltalake(t *testing.T) {
	for _, partitioned := range []bool{true, false} {
		name := map[bool]string{true: "partitioned", false: "flat"}[partitioned]
		t.Run(name, func(t *testing.T) {
			o := buildOurTable(t, partitioned)

			// Reload from disk: the snapshot the commits derived in memory
			// is not what a reader sees.
			snap, err := delta.Open(storage.NewLocal(o.root)).Snapshot(o.ctx)
			if err != nil {
				t.Fatalf("load snapshot: %v", err)
			}
			if snap.Version != 14 {
				t.Fatalf("version %d after 15 commits", snap.Version)
			}
			if got := snap.CheckpointVersion(); got != 10 {
				t.Fatalf("replay started from checkpoint %d, want the automatic one at 10", got)
			}

			apps := []string{"never-written"}
			for app := range o.txns {
				apps = append(apps, app)
			}
			sort.Strings(apps)
			py := readWithDeltalake(t, o.root, true, apps...)
			if py.Version != snap.Version {
				t.Errorf("version: deltalake read %d, we wrote %d", py.Version, snap.Version)
			}
			want := o.history[len(o.history)-1]
			compareOracle(t, o, want, py, apps)
			compareTxns(t, snap, py, apps)

			// Our own reader must agree with the oracle as well.
			cols := columnsOf(o.layout.Schema)
			_, ours := readRowsWithUs(t, o.ctx, o.root, snap)
			if d := diffRows("oracle", oracleState{}.keys(t, cols, want), "ours", ours); d != "" {
				t.Errorf("our reader's rows differ from what we wrote:\n%s", d)
			}

			if len(py.History) != len(o.history) {
				t.Fatalf("deltalake sees %d versions, we wrote %d", len(py.History), len(o.history))
			}
			for v, old := range py.History {
				t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
					compareOracle(t, o, o.history[v], old, apps)
				})
			}
		})
	}
}

// keys canonicalises the rows of st.
func (oracleState) keys(t *testing.T, cols []column, st oracleState) []string {
	t.Helper()
	var out []string
	for _, rows := range st.live {
		keys, err := oracleKeys(cols, rows)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keys...)
	}
	return out
}

// compareOracle checks deltalake's view of one version against the oracle.
func compareOracle(t *testing.T, o *ourTable, want oracleState, py pyTable, apps []string) {
	t.Helper()
	cols := columnsOf(o.layout.Schema)
	wantRows := oracleState{}.keys(t, cols, want)
	if len(wantRows) == 0 {
		t.Fatal("the oracle holds no rows: the comparison would prove nothing")
	}
	var wantFiles []string
	for p := range want.live {
		dp, _, err := delta.DecodePath(p)
		if err != nil {
			t.Fatal(err)
		}
		wantFiles = append(wantFiles, dp)
	}
	sort.Strings(wantFiles)
	if !reflect.DeepEqual(py.Files, wantFiles) {
		t.Errorf("live files:\n deltalake: %q\n oracle:    %q", py.Files, wantFiles)
	}
	for _, app := range apps {
		got := py.Txn[app]
		v, ok := want.txns[app]
		switch {
		case !ok && got != nil:
			t.Errorf("txn %q: deltalake read %d, we wrote none", app, *got)
		case ok && (got == nil || *got != v):
			t.Errorf("txn %q: deltalake read %s, we wrote %d", app, fmtVersion(got), v)
		}
	}
	theirs, err := jsonRows(cols, py.Rows)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRows("oracle", wantRows, "deltalake", theirs); d != "" {
		t.Errorf("deltalake's rows differ from what we wrote:\n%s", d)
	}
}

func fmtVersion(v *int64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
