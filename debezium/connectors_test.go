package debezium

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/cdcapply/cdcapply/schema"
)

// Envelopes shaped like the MySQL, SQL Server and Oracle connectors'
// documented output (source block fields and types as their docs list
// them), decoded end to end: values, table, sequence, key.

func b64s(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestDecodeMySQLEnvelope(t *testing.T) {
	cols := `[{"type":"int32","optional":false,"field":"id"},` +
		`{"type":"int16","optional":true,"name":"io.debezium.time.Year","field":"y"},` +
		`{"type":"string","optional":true,"name":"io.debezium.data.Enum","parameters":{"allowed":"S,M,L"},"field":"size"},` +
		`{"type":"string","optional":true,"name":"io.debezium.data.EnumSet","parameters":{"allowed":"a,b,c"},"field":"tags"},` +
		`{"type":"bytes","optional":true,"name":"io.debezium.data.Bits","parameters":{"length":"10"},"field":"flags"},` +
		`{"type":"string","optional":true,"name":"io.debezium.data.Json","field":"doc"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"dt"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","field":"tm"},` +
		`{"type":"struct","fields":[{"type":"bytes","optional":false,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"}],"optional":true,"name":"io.debezium.data.geometry.Geometry","field":"g"}]`
	source := `{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":true,"field":"table"},{"type":"int64","optional":false,"field":"server_id"},{"type":"string","optional":true,"field":"gtid"},{"type":"string","optional":false,"field":"file"},{"type":"int64","optional":false,"field":"pos"},{"type":"int32","optional":false,"field":"row"},{"type":"int64","optional":true,"field":"thread"},{"type":"string","optional":true,"field":"query"}],"optional":false,"name":"io.debezium.connector.mysql.Source","field":"source"}`
	sch := `{"type":"struct","fields":[{"type":"struct","fields":` + cols + `,"optional":true,"name":"mysql.inventory.t.Value","field":"before"},{"type":"struct","fields":` + cols + `,"optional":true,"name":"mysql.inventory.t.Value","field":"after"},` + source + `,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"mysql.inventory.t.Envelope"}`
	wkb := []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}
	payload := `{"before":null,"after":{"id":7,"y":2024,"size":"M","tags":"a,c","flags":"` + b64s([]byte{0x05, 0x02}) + `","doc":"{\"k\": [1, 2]}",` +
		`"dt":1709214356789,"tm":-3020000000,"g":{"wkb":"` + b64s(wkb) + `","srid":4326}},` +
		`"source":{"version":"2.7.0.Final","connector":"mysql","name":"mysql","ts_ms":1700000000000,"snapshot":"false","db":"inventory","sequence":null,"table":"t","server_id":223344,"gtid":null,"file":"mysql-bin.000003","pos":154,"row":1,"thread":7,"query":null},"op":"c","ts_ms":1700000000100}`
	d, err := New(SourceConnector(ConnectorMySQL))
	if err != nil {
		t.Fatal(err)
	}
	key := `{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"mysql.inventory.t.Key"},"payload":{"id":7}}`
	ch, err := d.Decode(context.Background(), rec("mysql.inventory.t", 1, []byte(key), []byte(`{"schema":`+sch+`,"payload":`+payload+`}`)))
	if err != nil {
		t.Fatal(err)
	}
	checkColumns(t, "mysql", ch.After, map[string]schema.Value{
		"y": schema.Int(2024), "size": schema.String("M"), "tags": schema.String("a,c"),
		"flags": schema.Bytes([]byte{0x05, 0x02}), "doc": schema.String(`{"k": [1, 2]}`),
		"dt": schema.Int(1709214356789000), "tm": schema.Int(-3020000000000), // MySQL TIME -00:50:20
		"g": schema.Struct(schema.Bytes(wkb), schema.Int(4326)),
	})
	if ch.Table != (Table{Database: "inventory", Table: "t"}) || ch.Seq.String() != "mysql(3,154,1)" || !ch.Key.Values[0].Equal(schema.Int(7)) {
		t.Errorf("table %+v seq %s key %+v", ch.Table, ch.Seq, ch.Key)
	}
}

func TestDecodeSQLServerEnvelope(t *testing.T) {
	value := `{"before":null,"after":{"id":1,"dto":"2019-01-01T12:00:00.1234567+01:00","dt2":1546344000123456700,"amount":"AwM="},` +
		`"source":{"version":"2.7.0.Final","connector":"sqlserver","name":"server1","ts_ms":1559729468470,"snapshot":"false","db":"testDB","sequence":null,"schema":"dbo","table":"customers","change_lsn":"00000027:00000758:0003","commit_lsn":"00000027:00000758:0005","event_serial_no":1},"op":"c","ts_ms":1559729471739}`
	rowType := `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},` +
		`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","field":"dto"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.NanoTimestamp","field":"dt2"},` +
		`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"19"},"field":"amount"}],"optional":true}`
	rt, err := schema.ParseConnect([]byte(rowType), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(SourceConnector(ConnectorSQLServer), RowType("", rt))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Decode(context.Background(), rec("server1.testDB.dbo.customers", 1, []byte(`{"id":1}`), []byte(value)))
	if err != nil {
		t.Fatal(err)
	}
	checkColumns(t, "sqlserver", ch.After, map[string]schema.Value{
		"dto":    schema.Int(tsMicros("2019-01-01T11:00:00.123456Z")), // 100ns digit truncated
		"dt2":    schema.Int(1546344000123456),
		"amount": decimalValue(t, "7.71", 2),
	})
	if ch.Table != (Table{Database: "testDB", Schema: "dbo", Table: "customers"}) ||
		ch.Seq.String() != "sqlserver(167503726424,5,167503726424,3,1)" {
		t.Errorf("table %+v seq %s", ch.Table, ch.Seq)
	}
}

func TestDecodeOracleEnvelope(t *testing.T) {
	rowType := `{"type":"struct","fields":[{"type":"struct","name":"io.debezium.data.VariableScaleDecimal","fields":[{"type":"int32","field":"scale"},{"type":"bytes","field":"value"}],"optional":false,"field":"ID"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","field":"CREATED"},` +
		`{"type":"string","optional":true,"field":"NAME"}],"optional":true}`
	rt, err := schema.ParseConnect([]byte(rowType), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(SourceConnector(ConnectorOracle), RowType("", rt), KeyColumns("ID"))
	if err != nil {
		t.Fatal(err)
	}
	value := `{"before":null,"after":{"ID":{"scale":0,"value":"Aw=="},"CREATED":1700000000000,"NAME":"x"},` +
		`"source":{"version":"2.7.0.Final","connector":"oracle","name":"server1","ts_ms":1700000000000,"snapshot":"false","db":"ORCLPDB1","sequence":null,"schema":"DEBEZIUM","table":"CUSTOMERS","txId":"6.28.807","scn":"2122185","commit_scn":"2122186","lcr_position":null,"rs_id":"0x000003.00000000.0010","ssn":0,"redo_thread":1,"user_name":"DEBEZIUM"},"op":"c","ts_ms":1700000000500}`
	ch, err := d.Decode(context.Background(), rec("server1.DEBEZIUM.CUSTOMERS", 1, nil, []byte(value)))
	if err != nil {
		t.Fatal(err)
	}
	checkColumns(t, "oracle", ch.After, map[string]schema.Value{"ID": schema.String("3"), "CREATED": schema.Int(1700000000000000)})
	if ch.Seq.String() != "oracle(2122186,2122185,0)" || ch.Key.Names[0] != "ID" || !ch.Key.Values[0].Equal(schema.String("3")) {
		t.Errorf("seq %s key %+v", ch.Seq, ch.Key)
	}
}
