package workload

import (
	"encoding/base64"
	"strconv"

	"github.com/cdcapply/cdcapply/debezium"
)

// AppendJSONLine appends r as one JSON line in the form of the recorded
// fixtures (debezium/testdata/real) and of bench/peers/CONTRACT.md:
// {"topic","partition","offset","timestamp" (ms),"key_b64","value_b64"},
// key and value in standard base64, null when absent.
func AppendJSONLine(dst []byte, r *debezium.Record) []byte {
	dst = append(dst, `{"topic":`...)
	dst = strconv.AppendQuote(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
	b64 := func(name string, b []byte) {
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		if b == nil {
			dst = append(dst, "null"...)
			return
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		dst = append(dst, '"')
	}
	b64("key_b64", r.Key)
	b64("value_b64", r.Value)
	return append(dst, "}\n"...)
}
