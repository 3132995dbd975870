package workload

import (
	"strconv"
	"time"

	"github.com/cdcapply/cdcapply/debezium"
)

// debeziumVersion is what source.version says; the envelope follows the
// records Debezium 3.x writes (see debezium/testdata/real/postgres-json).
const debeziumVersion = "3.6.1.Final"

// sourceSchema is the Connect schema of the PostgreSQL connector's source
// block.
const sourceSchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},` +
	`{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},` +
	`{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,` +
	`"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},` +
	`{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},` +
	`{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},` +
	`{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},` +
	`{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},` +
	`{"type":"int64","optional":true,"field":"xmin"},{"type":"string","optional":true,"field":"origin"},` +
	`{"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}`

const transactionSchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},` +
	`{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],` +
	`"optional":true,"name":"event.block","version":1,"field":"transaction"}`

// encoder writes records in JsonConverter form with schemas.enable=true.
// The schemas are constant per table, so they are rendered once.
type encoder struct {
	tbl         *table
	topic       string
	keyPrefix   string
	valuePrefix string
	srcPrefix   string
	srcMiddle   string
	srcTable    string
	hbTopic     string
	hbKey       []byte
	last        int // longest value so far: the next one's capacity
}

func newEncoder(cfg *Config, tbl *table) encoder {
	base := cfg.Topic()
	keySchema := `{"type":"struct","fields":[` + tbl.cols[0].connectField() + `],"optional":false,"name":"` + base + `.Key"}`
	row := base + ".Value"
	env := `{"type":"struct","fields":[` + tbl.rowSchema(row, "before") + `,` + tbl.rowSchema(row, "after") + `,` +
		sourceSchema + `,` + transactionSchema + `,{"type":"string","optional":false,"field":"op"},` +
		`{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},` +
		`{"type":"int64","optional":true,"field":"ts_ns"}],"optional":false,"name":"` + base + `.Envelope","version":2}`
	return encoder{
		tbl:         tbl,
		topic:       base,
		keyPrefix:   `{"schema":` + keySchema + `,"payload":{"` + tbl.cols[0].name + `":`,
		valuePrefix: `{"schema":` + env + `,"payload":{`,
		srcPrefix:   `"source":{"version":"` + debeziumVersion + `","connector":"postgresql","name":"` + cfg.Server + `","ts_ms":`,
		srcMiddle:   `,"db":"` + cfg.Database + `","sequence":`,
		srcTable:    `,"schema":"` + cfg.Schema + `","table":"` + cfg.Table + `"`,
		hbTopic:     cfg.HeartbeatTopic,
		hbKey: []byte(`{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"serverName"}],"optional":false,` +
			`"name":"io.debezium.connector.common.ServerNameKey","version":1},"payload":{"serverName":"` + cfg.Server + `"}}`),
	}
}

func (e *encoder) key(id int64) []byte {
	b := make([]byte, 0, len(e.keyPrefix)+24)
	b = append(b, e.keyPrefix...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, "}}"...)
}

func (e *encoder) row(b []byte, ch *Change, keyOnly bool) []byte {
	b = append(b, '{')
	for c, col := range e.tbl.cols {
		if c > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, col.name...)
		b = append(b, `":`...)
		switch {
		case c == 0:
			b = strconv.AppendInt(b, ch.ID, 10)
		case keyOnly:
			b = append(b, "null"...)
		case c == e.tbl.docCol() && ch.DocUnavailable:
			b = append(b, `"`+unavailable+`"`...)
		case c == e.tbl.docCol():
			b = e.tbl.appendJSON(b, ch.ID, ch.docStamp, c)
		default:
			b = e.tbl.appendJSON(b, ch.ID, ch.valStamp, c)
		}
	}
	return append(b, '}')
}

// change renders a change record. Updates carry no before image
// (REPLICA IDENTITY DEFAULT); deletes carry one holding only the key.
func (e *encoder) change(ch *Change, snapshot string) debezium.Record {
	// Build straight into the record's own slice, sized by the previous
	// record: one allocation and no copy (records are a few KiB, mostly
	// the inline schema, so copying showed up in profiles).
	b := make([]byte, 0, e.last+64)
	b = append(b, e.valuePrefix...)
	b = append(b, `"before":`...)
	if ch.Op == debezium.OpDelete {
		b = e.row(b, ch, true)
		b = append(b, `,"after":null,`...)
	} else {
		b = append(b, `null,"after":`...)
		b = e.row(b, ch, false)
		b = append(b, ',')
	}
	b = append(b, e.srcPrefix...)
	b = strconv.AppendInt(b, ch.SourceTsMs, 10)
	b = append(b, `,"snapshot":"`...)
	b = append(b, snapshot...)
	b = append(b, '"')
	b = append(b, e.srcMiddle...)
	b = append(b, `"[`...)
	if ch.Seq.Parts[0].Kind == debezium.PartNull {
		b = append(b, "null"...)
	} else {
		b = append(b, `\"`...)
		b = strconv.AppendUint(b, ch.Seq.Parts[0].U, 10)
		b = append(b, `\"`...)
	}
	b = append(b, `,\"`...)
	lsn := ch.Seq.Parts[1].U
	b = strconv.AppendUint(b, lsn, 10)
	b = append(b, `\"]","ts_us":`...)
	b = strconv.AppendInt(b, ch.SourceTsMs*1000, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, ch.SourceTsMs*1_000_000, 10)
	b = append(b, e.srcTable...)
	b = append(b, `,"txId":`...)
	b = strconv.AppendInt(b, ch.TxID, 10)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendUint(b, lsn, 10)
	b = append(b, `,"xmin":null,"origin":null,"origin_lsn":null},"transaction":null,"op":"`...)
	b = append(b, byte(ch.Op))
	// Debezium processes a change a little after its commit.
	processed := ch.SourceTsMs + 2
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, processed, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, processed*1000, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, processed*1_000_000, 10)
	b = append(b, "}}"...)
	e.last = max(e.last, len(b))
	return debezium.Record{Topic: e.topic, Key: e.key(ch.ID), Value: b, Timestamp: time.UnixMilli(processed)}
}

func (e *encoder) heartbeat(at time.Time) debezium.Record {
	v := `{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,` +
		`"name":"io.debezium.connector.common.Heartbeat","version":1},"payload":{"ts_ms":` + strconv.FormatInt(at.UnixMilli(), 10) + `}}`
	return debezium.Record{Topic: e.hbTopic, Key: e.hbKey, Value: []byte(v), Timestamp: at}
}
