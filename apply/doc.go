// Package apply is the pipeline that keeps Delta tables equal to their
// Debezium sources: configuration, batching, reduction to the latest change
// per key by source sequence, merge planning with the sequence guard and
// soft-delete tombstones, data file writes and the one Delta commit that
// carries both the data and the Kafka progress.
package apply
