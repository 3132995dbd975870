package schema

import "testing"

// FuzzParseAvro: any schema text either compiles to a plan whose every
// node has a column type, or fails with an error; never a panic or a loop.
func FuzzParseAvro(f *testing.F) {
	f.Add(`{"type":"record","name":"V","fields":[{"name":"a","type":["null",{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}]},{"name":"b","type":{"type":"array","items":"string"}}]}`)
	f.Add(`{"type":"record","name":"A","fields":[{"name":"self","type":["null","A"]}]}`)
	f.Add(`{"type":"record","name":"E","namespace":"n","fields":[{"name":"x","type":{"type":"enum","name":"S","symbols":["a","b"]}},{"name":"y","type":"n.S"},{"name":"z","type":{"type":"fixed","name":"F","size":4}},{"name":"m","type":{"type":"map","values":"long"}}]}`)
	f.Fuzz(func(t *testing.T, text string) {
		n, err := ParseAvro(text, nil)
		if err != nil {
			return
		}
		if n.Col == nil || n.Col.Delta == nil {
			t.Fatalf("compiled schema without a column type")
		}
	})
}

// FuzzParseConnect: any inline schema either compiles with a Delta type for
// every node or fails with an error.
func FuzzParseConnect(f *testing.F) {
	f.Add(`{"type":"struct","fields":[{"type":"int32","field":"id"},{"type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"p"},{"type":"array","items":{"type":"string"},"field":"t"},{"type":"map","keys":{"type":"string"},"values":{"type":"int64"},"field":"m"}]}`)
	f.Add(`{"type":"struct","fields":[{"type":"struct","name":"io.debezium.data.VariableScaleDecimal","fields":[{"type":"int32","field":"scale"},{"type":"bytes","field":"value"}],"field":"v"}]}`)
	f.Fuzz(func(t *testing.T, text string) {
		typ, err := ParseConnect([]byte(text), nil)
		if err != nil {
			return
		}
		var walk func(*Type)
		walk = func(x *Type) {
			if x.Delta == nil {
				t.Fatalf("node %s without a Delta type", x.Base)
			}
			for _, f := range x.Fields {
				walk(f.Type)
			}
			if x.Elem != nil {
				walk(x.Elem)
			}
		}
		walk(typ)
	})
}
