package debezium

import (
	"strings"
	"testing"
)

// TestRealE2EFixtures decodes what Debezium emitted in the end-to-end runs
// (scripts/e2e.sh: testdata/real/postgres-e2e-json and, once recorded,
// postgres-e2e-avro) and checks the shapes that workload was written to
// produce, so a decoder change that loses one fails here without a
// database: snapshot reads and streamed creates, updates and deletes on
// every table, TOAST placeholders on the default-identity table, the
// truncate, the column added mid-stream, the primary-key change (delete
// and create in one transaction) and the hot key's thousands of updates.
func TestRealE2EFixtures(t *testing.T) {
	runs := loadRealRuns(t)
	decs := realDecoders(t, runs)
	found := 0
	for _, name := range []string{"postgres-e2e-json", "postgres-e2e-avro"} {
		run, ok := findRun(runs, name)
		if !ok {
			continue
		}
		found++
		prefix := "e2e_plain"
		if strings.HasSuffix(name, "-avro") {
			prefix = "e2e_avro"
		}
		byTopic := decodeRun(t, run, decs[name])
		ops := func(table string) map[Op]int {
			m := map[Op]int{}
			for _, x := range byTopic[prefix+".app."+table] {
				if x.ch.Class == ClassChange {
					m[x.ch.Op]++
				}
			}
			return m
		}
		for _, table := range []string{"customers", "order_lines", "documents", "sessions"} {
			m := ops(table)
			for _, op := range []Op{OpRead, OpCreate, OpUpdate, OpDelete} {
				if m[op] == 0 && (table != "sessions" || op != OpDelete) { // sessions are truncated, not deleted
					t.Errorf("%s %s: no %s changes (%v)", name, table, op, m)
				}
			}
		}
		if m := ops("sessions"); m[OpTruncate] != 1 {
			t.Errorf("%s sessions: %d truncates, want 1", name, m[OpTruncate])
		}
		if m := ops("counters"); m[OpUpdate] < 4000 {
			t.Errorf("%s counters: %d updates of the hot keys, want >= 4000", name, m[OpUpdate])
		}
		unavailable := 0
		for _, x := range byTopic[prefix+".app.documents"] {
			if x.ch.Class != ClassChange || !x.ch.After.Present() {
				continue
			}
			if v, ok := x.ch.After.Get("body"); ok && v.IsUnavailable() {
				unavailable++
			}
		}
		if unavailable == 0 {
			t.Errorf("%s documents: no update with the TOASTed body unavailable", name)
		}
		// The column added mid-stream appears in later images only.
		withNote := 0
		for _, x := range byTopic[prefix+".app.order_lines"] {
			if x.ch.Class == ClassChange && x.ch.After.Present() {
				if _, ok := x.ch.After.Get("note"); ok {
					withNote++
				}
			}
		}
		if withNote == 0 || withNote == len(byTopic[prefix+".app.order_lines"]) {
			t.Errorf("%s order_lines: %d images with the added column note of %d records", name, withNote, len(byTopic[prefix+".app.order_lines"]))
		}
		// customers 100 -> 100100: a delete of the old key and a create of
		// the new one at the same sequence.
		var del, cre *Change
		for i := range byTopic[prefix+".app.customers"] {
			x := &byTopic[prefix+".app.customers"][i]
			if x.ch.Class != ClassChange || len(x.ch.Key.Values) != 1 {
				continue
			}
			switch k := x.ch.Key.Values[0].I; {
			case x.ch.Op == OpDelete && k == 100 && del == nil:
				del = &x.ch
			case x.ch.Op == OpCreate && k == 100100:
				cre = &x.ch
			}
		}
		if del == nil || cre == nil || del.Seq.Compare(cre.Seq) != 0 {
			t.Errorf("%s customers: primary-key change 100 -> 100100 not a delete and create at one sequence (%v, %v)", name, del, cre)
		}
	}
	if found == 0 {
		t.Skip("no end-to-end recordings in testdata/real (scripts/e2e.sh)")
	}
}
