package debezium

import "fmt"

// Reason is why a record was rejected; the apply engine quarantines the
// record under this reason (and counts it per reason).
type Reason string

// The rejection reasons.
const (
	ReasonMalformedJSON   Reason = "malformed_json"
	ReasonMalformedAvro   Reason = "malformed_avro"
	ReasonMalformedKey    Reason = "malformed_key"
	ReasonUnknownOp       Reason = "unknown_op"
	ReasonMissingKey      Reason = "missing_key"
	ReasonNullSequence    Reason = "null_sequence"
	ReasonBadSequence     Reason = "bad_sequence"
	ReasonOutOfRange      Reason = "value_out_of_range"
	ReasonInvalidValue    Reason = "invalid_value"
	ReasonUnknownSchemaID Reason = "unknown_schema_id"
	ReasonBadSchema       Reason = "bad_schema"
	ReasonNoTableSchema   Reason = "no_table_schema"
	ReasonUnknownColumn   Reason = "unknown_column"
	ReasonMissingImage    Reason = "missing_image"
	// ReasonRegistryUnavailable is the one retryable reason: the schema
	// registry could not be asked, the record itself may be fine.
	ReasonRegistryUnavailable Reason = "registry_unavailable"
)

// Rejection is the error for a record that cannot become a Change.
type Rejection struct {
	Reason Reason
	Pos    Position
	Detail string
	Err    error // underlying cause, may be nil
}

// Error names the record's topic, partition and offset, the reason and the
// detail.
func (r *Rejection) Error() string {
	s := fmt.Sprintf("reject %s: %s", r.Pos, r.Reason)
	if r.Detail != "" {
		s += ": " + r.Detail
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (r *Rejection) Unwrap() error { return r.Err }

// Retryable reports whether decoding the same record again may succeed
// (the registry was unreachable), so the caller should retry rather than
// quarantine.
func (r *Rejection) Retryable() bool { return r.Reason == ReasonRegistryUnavailable }

func reject(pos Position, reason Reason, err error, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Pos: pos, Detail: fmt.Sprintf(format, args...), Err: err}
}
