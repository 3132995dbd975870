package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// lastCheckpointPath is where the hint to the latest checkpoint lives.
const lastCheckpointPath = LogDir + "/_last_checkpoint"

// LastCheckpoint is the content of _delta_log/_last_checkpoint: a hint that
// lets a reader start listing the log at the latest checkpoint instead of at
// version 0. It is only a hint: it may be stale (a newer checkpoint exists),
// missing or corrupt, and readers must still work.
type LastCheckpoint struct {
	// Version is the table version the checkpoint reflects.
	Version int64 `json:"version"`
	// Size is the number of actions stored in the checkpoint.
	Size int64 `json:"size"`
	// Parts is the number of parts of a multi-part checkpoint; nil for a
	// single-file one.
	Parts *int `json:"parts,omitempty"`
	// SizeInBytes is the total size of the checkpoint files.
	SizeInBytes *int64 `json:"sizeInBytes,omitempty"`
	// NumOfAddFiles is the number of add actions in the checkpoint.
	NumOfAddFiles *int64 `json:"numOfAddFiles,omitempty"`
	// CheckpointSchema is the checkpoint's schema in Delta's schema JSON,
	// carried as written by others (we do not write it).
	CheckpointSchema json.RawMessage `json:"checkpointSchema,omitempty"`
	// V2Checkpoint describes the top-level file of a V2 checkpoint.
	V2Checkpoint *LastCheckpointV2 `json:"v2Checkpoint,omitempty"`
	// Checksum is the writer's MD5 over the other fields. It is read and
	// kept but not verified: the file is a hint, and a wrong hint costs a
	// log listing, never correctness.
	Checksum string `json:"checksum,omitempty"`
}

// LastCheckpointV2 is the v2Checkpoint field of _last_checkpoint: the
// top-level file of a V2 checkpoint with its non-file actions and sidecars
// inlined, so a reader may skip reading the top-level file.
type LastCheckpointV2 struct {
	// Path is the top-level checkpoint file's name within _delta_log.
	Path string `json:"path"`
	// SizeInBytes is the top-level file's size.
	SizeInBytes int64 `json:"sizeInBytes"`
	// ModificationTime is the top-level file's modification time in Unix ms.
	ModificationTime int64 `json:"modificationTime"`
	// NonFileActions are the checkpoint's actions other than add and remove.
	NonFileActions []Action `json:"nonFileActions,omitempty"`
	// SidecarFiles are the sidecar actions of the checkpoint.
	SidecarFiles []Sidecar `json:"sidecarFiles,omitempty"`
}

// readLastCheckpoint reads _delta_log/_last_checkpoint. A missing or corrupt
// file returns (nil, nil): it is only a hint, and the caller falls back to
// listing the log. Other read failures are returned, because silently
// ignoring an I/O error would hide a broken store.
func readLastCheckpoint(ctx context.Context, store storage.Storage) (*LastCheckpoint, error) {
	data, err := store.Read(ctx, lastCheckpointPath)
	if errors.Is(err, storage.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read last checkpoint: %w", err)
	}
	lc, ok := parseLastCheckpoint(data)
	if !ok {
		return nil, nil
	}
	return lc, nil
}

// parseLastCheckpoint decodes _last_checkpoint and reports whether it is
// usable: valid JSON with a non-negative version and size, and a sane part
// count. Anything else is treated as absent.
func parseLastCheckpoint(data []byte) (*LastCheckpoint, bool) {
	// version is required; a file without it must not be read as version 0.
	var probe struct {
		Version *int64 `json:"version"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Version == nil {
		return nil, false
	}
	var lc LastCheckpoint
	if err := json.Unmarshal(data, &lc); err != nil {
		return nil, false
	}
	if lc.Version < 0 || lc.Size < 0 || (lc.Parts != nil && *lc.Parts < 1) {
		return nil, false
	}
	return &lc, true
}

// writeLastCheckpoint replaces _delta_log/_last_checkpoint. It is written
// after the checkpoint itself so that the hint never points at a checkpoint
// that is not complete.
func writeLastCheckpoint(ctx context.Context, store storage.Storage, lc *LastCheckpoint) error {
	data, err := json.Marshal(lc)
	if err != nil {
		return fmt.Errorf("encode last checkpoint: %w", err)
	}
	if err := store.Write(ctx, lastCheckpointPath, data); err != nil {
		return fmt.Errorf("write last checkpoint: %w", err)
	}
	return nil
}
