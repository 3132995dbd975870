// Package refbench measures fast struct-based decoders (goccy/go-json and
// hamba/avro, both decoding into Go structs generated for one known table)
// on the same records as the debezium package's decode benchmarks, so the
// runtime-schema decoder can be compared with them in the same run on the
// same machine. It is a separate module so that these decoders never become
// dependencies of cdcapply.
//
//	go test ./debezium -run '^$' -bench Decode -cpu 1
//	(cd debezium/internal/refbench && go test -run '^$' -bench . -cpu 1)
package refbench
