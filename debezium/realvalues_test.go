package debezium

import (
	"encoding/hex"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/schema"
)

// The expected values below are derived from the SQL that produced the
// fixtures (scripts/infra/fixtures/schema.sql and workload.sql) and from
// Debezium's documented encodings, not read back from the records.

func tsMicros(s string) int64 {
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return ts.UnixMicro()
}

func days(s string) int64 {
	ts, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return ts.Unix() / 86400
}

func decimalValue(t *testing.T, text string, scale int32) schema.Value {
	t.Helper()
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		t.Fatalf("decimal %q", text)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() || !r.Num().IsInt64() {
		t.Fatalf("decimal %q at scale %d", text, scale)
	}
	u := r.Num().Int64()
	return schema.Value{Kind: schema.KindDecimal, I: u, Hi: u >> 63, Scale: scale}
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func checkColumns(t *testing.T, what string, img Row, want map[string]schema.Value) {
	t.Helper()
	if !img.Present() {
		t.Fatalf("%s: no image", what)
	}
	for name, w := range want {
		v, ok := img.Get(name)
		if !ok {
			t.Errorf("%s: no column %s", what, name)
			continue
		}
		if !v.Equal(w) {
			t.Errorf("%s: %s = %#v, want %#v", what, name, v, w)
		}
	}
}

func TestRealFixtureValues(t *testing.T) {
	runs := requireRealRuns(t)
	decs := realDecoders(t, runs)
	run, _ := findRun(runs, "postgres-json")
	byTopic := decodeRun(t, run, decs["postgres-json"])
	types := changesOf(byTopic, "postgres_json", "all_types")
	if len(types) < 5 {
		t.Fatalf("%d all_types changes", len(types))
	}
	ns := func(h, m, s, frac int64, unit int64) schema.Value {
		return schema.Int(((h*60+m)*60+s)*1_000_000_000 + frac*unit)
	}
	// Snapshot row 1: every column type.
	row1 := types[0]
	if row1.Op != OpRead || row1.Snapshot == "" || row1.Seq.Parts[0].Kind != PartNull {
		t.Errorf("row 1: op %s snapshot %q seq %s", row1.Op, row1.Snapshot, row1.Seq)
	}
	checkColumns(t, "all_types id 1", row1.After, map[string]schema.Value{
		"id":            schema.Int(1),
		"c_smallint":    schema.Int(32767),
		"c_integer":     schema.Int(2147483647),
		"c_bigint":      schema.Int(math.MaxInt64),
		"c_real":        schema.Float(3.25),
		"c_double":      schema.Float(2.718281828459045),
		"c_numeric":     decimalValue(t, "12345678.9012", 4),
		"c_numeric_var": schema.String("3.14159265358979323846264338327950288"),
		"c_boolean":     schema.Bool(true),
		"c_text":        schema.String(`plain text with ünïcödé and "quotes"`),
		"c_varchar":     schema.String("varchar value"),
		"c_char":        schema.String("ab   "),
		"c_bytea":       schema.Bytes(unhex("deadbeef00ff")),
		"c_date":        schema.Int(days("2024-02-29")),
		"c_time":        ns(13, 45, 56, 123456, 1000),
		"c_time3":       ns(8, 9, 10, 123, 1_000_000),
		"c_timetz":      schema.String("11:45:56.5Z"),
		"c_timestamp":   schema.Int(tsMicros("2024-02-29T13:45:56.123456Z")),
		"c_timestamp3":  schema.Int(tsMicros("2024-02-29T13:45:56.789Z")),
		"c_timestamptz": schema.Int(tsMicros("2024-02-29T13:45:56.123456+02:00")),
		// 1 year 2 mons 3 days 04:05:06.789 with Debezium's 365.25/12-day month.
		"c_interval":   schema.Int(int64((14*365.25/12+3)*86400e6) + ((4*60+5)*60+6)*1e6 + 789e3),
		"c_json":       schema.String(`{"a": 1, "b": [true, null]}`),
		"c_jsonb":      schema.String(`{"a": {"nested": 1.5}, "z": "last"}`),
		"c_uuid":       schema.String("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
		"c_enum":       schema.String("happy"),
		"c_bit1":       schema.Bool(true),
		"c_bit":        schema.Bytes([]byte{0xAA, 0x0A}), // B'101010101010' = 0xAAA, little-endian
		"c_varbit":     schema.Bytes([]byte{0x0D}),       // B'1101'
		"c_xml":        schema.String(`<root><child attr="1">text</child></root>`),
		"c_int_array":  schema.List(schema.Int(1), schema.Int(2), schema.Int(3)),
		"c_text_array": schema.List(schema.String("x"), schema.String("y z"), schema.Null),
		"c_money":      decimalValue(t, "1234.56", 2),
		"c_inet":       schema.String("192.168.1.10"),
		"c_cidr":       schema.String("10.0.0.0/8"),
		"c_macaddr":    schema.String("08:00:2b:01:02:03"),
		"c_hstore":     schema.String(`{"k1":"v1","k2":null}`),
		"c_int4range":  schema.String("[1,10)"),
		// point (1.5,2.5): x, y and its WKB (little-endian point, no SRID).
		"c_point": schema.Struct(schema.Float(1.5), schema.Float(2.5),
			schema.Bytes(unhex("0101000000000000000000f83f0000000000000440")), schema.Null),
	})
	// Row 2: all null but the key.
	if v, _ := types[1].After.Get("c_numeric"); !v.IsNull() {
		t.Errorf("row 2 c_numeric = %#v, want NULL", v)
	}
	// Row 3: edges and infinities.
	checkColumns(t, "all_types id 3", types[2].After, map[string]schema.Value{
		"c_smallint":    schema.Int(-32768),
		"c_bigint":      schema.Int(math.MinInt64),
		"c_real":        schema.Float(math.Inf(1)),
		"c_double":      schema.Float(math.Inf(-1)),
		"c_numeric":     decimalValue(t, "-99999999.9999", 4),
		"c_numeric_var": schema.String("-0.000000000000000000001"),
		"c_bytea":       schema.Bytes([]byte{}),
		"c_date":        schema.Int(schema.MaxDateDays),
		"c_time":        schema.Int(0),
		"c_time3":       ns(23, 59, 59, 999, 1_000_000),
		"c_timestamp":   schema.Int(schema.MaxTimestampMicros),
		"c_timestamp3":  schema.Int(schema.MinTimestampMicros),
		"c_timestamptz": schema.Int(schema.MaxTimestampMicros),
		"c_interval":    schema.Int(math.MinInt64), // -178000000 years saturates
		"c_bit1":        schema.Bool(false),
		"c_int_array":   schema.List(),
		"c_money":       decimalValue(t, "-92233720368547758.08", 2),
	})
	// Row 4: -infinity and NaN.
	checkColumns(t, "all_types id 4", types[3].After, map[string]schema.Value{
		"c_date":        schema.Int(schema.MinDateDays),
		"c_timestamp":   schema.Int(schema.MinTimestampMicros),
		"c_timestamptz": schema.Int(schema.MinTimestampMicros),
		"c_real":        schema.Float(math.NaN()),
		"c_double":      schema.Float(math.NaN()),
		"c_numeric_var": schema.String("0"),
	})
	// Row 5: real year-1 values (not infinity) and 24:00.
	checkColumns(t, "all_types id 5", types[4].After, map[string]schema.Value{
		"c_date":        schema.Int(schema.MinDateDays),
		"c_timestamp":   schema.Int(tsMicros("0001-01-01T00:00:00Z")),
		"c_timestamptz": schema.Int(0),
		"c_time":        ns(24, 0, 0, 0, 1),
		"c_timetz":      schema.String("13:59:59.999999Z"),
	})

	// TOAST: the update that leaves body alone carries the placeholder,
	// decoded as the unavailable marker; the later update carries a value.
	docs := changesOf(byTopic, "postgres_json", "documents")
	var sawUnavailable, sawRewrite bool
	for _, ch := range docs {
		if ch.Op != OpUpdate {
			continue
		}
		body, _ := ch.After.Get("body")
		title, _ := ch.After.Get("title")
		switch {
		case body.IsUnavailable():
			sawUnavailable = true
			if !title.Equal(schema.String("retitled")) {
				t.Errorf("TOAST update title %#v", title)
			}
		case body.Equal(schema.String("short body now")):
			sawRewrite = true
		}
	}
	if !sawUnavailable || !sawRewrite {
		t.Errorf("documents: unavailable body %v, rewritten body %v", sawUnavailable, sawRewrite)
	}

	// Composite key, and the primary-key change as delete + create at one
	// WAL position.
	lines := changesOf(byTopic, "postgres_json", "order_lines")
	var del, cre *Change
	for i := range lines {
		ch := &lines[i]
		if len(ch.Key.Names) != 2 || ch.Key.Names[0] != "order_id" || ch.Key.Names[1] != "line_no" {
			t.Fatalf("order_lines key %+v", ch.Key)
		}
		if ch.Op == OpDelete && ch.Key.Values[0].Equal(schema.Int(200)) && ch.Key.Values[1].Equal(schema.Int(3)) {
			del = ch
		}
		if ch.Op == OpCreate && ch.Key.Values[1].Equal(schema.Int(9)) {
			cre = ch
		}
	}
	if del == nil || cre == nil {
		t.Fatal("primary-key change: delete of (200,3) or create of (200,9) missing")
	}
	if del.Seq.Compare(cre.Seq) != 0 || del.Pos.Offset >= cre.Pos.Offset {
		t.Errorf("primary-key change: delete %s @%d, create %s @%d", del.Seq, del.Pos.Offset, cre.Seq, cre.Pos.Offset)
	}
	checkColumns(t, "order_lines (200,9)", cre.After, map[string]schema.Value{
		"sku": schema.String("SKU-E"), "qty": schema.Int(3), "price": decimalValue(t, "0.01", 2),
	})

	// Truncate.
	var truncates int
	for _, ch := range changesOf(byTopic, "postgres_json", "scratch") {
		if ch.Op == OpTruncate {
			truncates++
			if len(ch.Key.Values) != 0 || ch.Before.Present() || ch.After.Present() {
				t.Errorf("truncate %+v", ch)
			}
		}
	}
	if truncates != 1 {
		t.Errorf("%d truncates, want 1", truncates)
	}

	// Text key from a unique index.
	acc := changesOf(byTopic, "postgres_json", "accounts")
	if len(acc) == 0 || acc[0].Key.Names[0] != "email" || !acc[0].Key.Values[0].Equal(schema.String("alice@example.com")) {
		t.Errorf("accounts key %+v", acc)
	}
	checkColumns(t, "accounts alice", acc[0].After, map[string]schema.Value{
		"balance": decimalValue(t, "100.00", 2), "updated": schema.Int(tsMicros("2024-01-01T00:00:00Z")),
	})

	// PostGIS: geometry structs of WKB and SRID.
	places := changesOf(byTopic, "postgres_json", "places")
	if len(places) >= 2 {
		checkColumns(t, "places origin", places[0].After, map[string]schema.Value{
			// POINT(0 0) SRID 4326 as EWKB: little-endian, type 1 with the SRID flag.
			"geom": schema.Struct(schema.Bytes(unhex("0101000020e610000000000000000000000000000000000000")), schema.Int(4326)),
		})
		checkColumns(t, "places null", places[1].After, map[string]schema.Value{"geom": schema.Null, "geog": schema.Null})
	}

	// Transaction markers: the first multi-row transaction (3 order lines,
	// 1 insert and 1 update of accounts) ends with 5 events.
	var ends []int64
	for _, x := range byTopic["postgres_json.transaction"] {
		if x.ch.Tx.Status == "END" {
			ends = append(ends, x.ch.Tx.EventCount)
		}
	}
	found := false
	for _, n := range ends {
		found = found || n == 5
	}
	if !found {
		t.Errorf("no END marker with 5 events among %v", ends)
	}
}

// TestRealFixtureHandlingModes checks the run recorded with non-default
// handling modes (binary hex, decimal string, time precision connect,
// interval string, hstore map) value by value: the mode-dependent columns
// against their documented forms, every other column against the default
// run.
func TestRealFixtureHandlingModes(t *testing.T) {
	runs := requireRealRuns(t)
	modesRun, ok := findRun(runs, "postgres-jsonmodes")
	if !ok {
		t.Skip("no postgres-jsonmodes recording")
	}
	decs := realDecoders(t, runs)
	baseRun, _ := findRun(runs, "postgres-json")
	base := changesOf(decodeRun(t, baseRun, decs["postgres-json"]), "postgres_json", "all_types")
	modes := changesOf(decodeRun(t, modesRun, decs["postgres-jsonmodes"]), "postgres_jsonmodes", "all_types")
	if len(modes) != len(base) || len(modes) < 5 {
		t.Fatalf("%d changes, want %d", len(modes), len(base))
	}
	st, err := modes[0].After.Type.DeltaSchema()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"c_bytea": "binary", "c_numeric": "string", "c_time": "long", "c_timestamp": "timestamp",
		"c_interval": "string", "c_hstore": "map<string,string>",
	} {
		if f, _, ok := st.Field(name); !ok || f.Type.String() != want {
			t.Errorf("%s: delta type %v, want %s", name, f.Type, want)
		}
	}
	ns := func(h, m, s, ms int64) schema.Value { return schema.Int(((h*60+m)*60+s)*1e9 + ms*1e6) }
	special := map[string]bool{"c_numeric": true, "c_numeric_var": true, "c_money": true, "c_time": true, "c_timestamp": true, "c_interval": true, "c_hstore": true}
	checkColumns(t, "modes id 1", modes[0].After, map[string]schema.Value{
		"c_bytea":       schema.Bytes(unhex("deadbeef00ff")),
		"c_numeric":     schema.String("12345678.9012"),
		"c_numeric_var": schema.String("3.14159265358979323846264338327950288"),
		"c_money":       schema.String("1234.56"),
		"c_time":        ns(13, 45, 56, 123), // connect precision: milliseconds
		"c_timestamp":   schema.Int(tsMicros("2024-02-29T13:45:56.123Z")),
		"c_interval":    schema.String("P1Y2M3DT4H5M6.789S"),
		"c_hstore":      schema.Map(schema.String("k1"), schema.String("v1"), schema.String("k2"), schema.Null),
	})
	checkColumns(t, "modes id 3", modes[2].After, map[string]schema.Value{
		"c_bytea":     schema.Bytes([]byte{}),
		"c_timestamp": schema.Int(schema.MaxTimestampMicros),
		"c_date":      schema.Int(schema.MaxDateDays),
		"c_hstore":    schema.Map(),
	})
	for i := range base {
		for _, c := range base[i].After.Columns() {
			if special[c.Name] || !base[i].After.Present() {
				continue
			}
			want, _ := base[i].After.Get(c.Name)
			got, _ := modes[i].After.Get(c.Name)
			if !got.Equal(want) {
				t.Errorf("change %d column %s = %#v, want %#v as in the default run", i, c.Name, got, want)
			}
		}
	}
}

// TestRealMariaDBValues checks the MariaDB recording (Debezium's MySQL
// connector, default modes) against scripts/infra/fixtures/mariadb-*.sql.
func TestRealMariaDBValues(t *testing.T) {
	runs := requireRealRuns(t)
	run, ok := findRun(runs, "mariadb-json")
	if !ok {
		t.Skip("no MariaDB recording")
	}
	byTopic := decodeRun(t, run, realDecoders(t, runs)["mariadb-json"])
	types := changesOf2(byTopic, "mariadb_json.cdcfix")("all_types")
	if len(types) < 4 {
		t.Fatalf("%d all_types changes", len(types))
	}
	ns := func(h, m, s, frac int64) schema.Value { return schema.Int(((h*60+m)*60+s)*1_000_000_000 + frac*1000) }
	checkColumns(t, "mariadb id 1", types[0].After, map[string]schema.Value{
		"c_tinyint": schema.Int(127), "c_tinyint_u": schema.Int(255), "c_smallint": schema.Int(32767),
		"c_mediumint": schema.Int(8388607), "c_int": schema.Int(2147483647), "c_int_u": schema.Int(4294967295),
		"c_bigint": schema.Int(math.MaxInt64),
		// bigint.unsigned.handling.mode=long: the uint64 bits as a long.
		"c_bigint_u":  schema.Int(-1),
		"c_decimal":   decimalValue(t, "12345678.9012", 4),
		"c_float":     schema.Float(3.25),
		"c_double":    schema.Float(2.718281828459045),
		"c_bool":      schema.Int(1), // BOOLEAN is TINYINT(1): int16
		"c_bit1":      schema.Bool(true),
		"c_bit":       schema.Bytes([]byte{0xAA, 0x0A}),
		"c_char":      schema.String("ab"),
		"c_text":      schema.String("text with ünïcödé"),
		"c_blob":      schema.Bytes(unhex("deadbeef00ff")),
		"c_binary":    schema.Bytes(unhex("01020304")),
		"c_varbinary": schema.Bytes(unhex("cafe")),
		"c_date":      schema.Int(days("2024-02-29")),
		"c_time":      ns(13, 45, 56, 123456),
		"c_datetime":  schema.Int(tsMicros("2024-02-29T13:45:56.123456Z")),
		"c_datetime0": schema.Int(tsMicros("2024-02-29T13:45:56Z")),
		"c_timestamp": schema.Int(tsMicros("2024-02-29T13:45:56.123456Z")),
		"c_year":      schema.Int(2024),
		"c_enum":      schema.String("happy"),
		"c_set":       schema.String("a,c"),
		"c_json":      schema.String(`{"a": 1, "b": [true, null]}`),
		// POINT(1 2): x, y, little-endian WKB, no SRID.
		"c_point": schema.Struct(schema.Float(1), schema.Float(2), schema.Bytes(unhex("0101000000000000000000f03f0000000000000040")), schema.Null),
	})
	checkColumns(t, "mariadb id 3", types[2].After, map[string]schema.Value{
		"c_tinyint": schema.Int(-128), "c_bigint": schema.Int(math.MinInt64), "c_bigint_u": schema.Int(0),
		"c_decimal":   decimalValue(t, "-99999999.9999", 4),
		"c_float":     schema.Float(float64(float32(-1.5e-10))),
		"c_double":    schema.Float(1e308),
		"c_bit":       schema.Bytes([]byte{0, 0}),
		"c_varbinary": schema.Bytes([]byte{}),
		"c_date":      schema.Null, // the zero date
		"c_time":      schema.Int(-((838*60+59)*60 + 59) * 1_000_000_000),
		"c_datetime":  schema.Int(tsMicros("1000-01-01T00:00:00Z")),
		"c_datetime0": schema.Null, // the zero datetime
		"c_timestamp": schema.Int(1_000_000),
		"c_year":      schema.Int(1901),
		"c_set":       schema.String(""),
	})
	checkColumns(t, "mariadb id 4", types[3].After, map[string]schema.Value{
		"c_time":     schema.Int(((838*60+59)*60 + 59) * 1_000_000_000),
		"c_datetime": schema.Int(tsMicros("9999-12-31T23:59:59.999999Z")),
		"c_date":     schema.Int(days("9999-12-31")),
		"c_year":     schema.Int(2155),
	})

	// Binary log rotation: FLUSH BINARY LOGS moves to binlog.000002 where
	// positions restart low; those changes still order after.
	lines := changesOf2(byTopic, "mariadb_json.cdcfix")("order_lines")
	var before, after *Change
	for i := range lines {
		ch := &lines[i]
		if ch.Seq.Parts[0].U == 1 && ch.Op == OpUpdate {
			before = ch
		}
		if ch.Seq.Parts[0].U == 2 && after == nil {
			after = ch
		}
	}
	if before == nil || after == nil {
		t.Fatal("no changes on both sides of the binlog rotation")
	}
	if after.Seq.Parts[1].U >= before.Seq.Parts[1].U || after.Seq.Compare(before.Seq) <= 0 {
		t.Errorf("rotation: %s should order after %s with a lower position", after.Seq, before.Seq)
	}
	// The primary-key change: delete (200,3) and create (200,9) at one position.
	var del, cre *Change
	for i := range lines {
		ch := &lines[i]
		if ch.Op == OpDelete && ch.Key.Values[1].Equal(schema.Int(3)) {
			del = ch
		}
		if ch.Op == OpCreate && ch.Key.Values[1].Equal(schema.Int(9)) {
			cre = ch
		}
	}
	if del == nil || cre == nil || del.Seq.Compare(cre.Seq) != 0 {
		t.Errorf("primary-key change: delete %v create %v", del, cre)
	}
	// A column added mid-stream: later changes carry it, typed from the
	// new inline schema.
	last := lines[len(lines)-1]
	checkColumns(t, "order_lines after ALTER", last.After, map[string]schema.Value{"note": schema.String("late note")})
	if _, ok := lines[0].After.Get("note"); ok {
		t.Error("the first change already has the added column")
	}
	// Truncate.
	var truncates int
	for _, ch := range changesOf2(byTopic, "mariadb_json.cdcfix")("scratch") {
		if ch.Op == OpTruncate {
			truncates++
		}
	}
	if truncates != 1 {
		t.Errorf("%d truncates, want 1", truncates)
	}
}
