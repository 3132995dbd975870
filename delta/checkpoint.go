package delta

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// A Delta log checkpoint is the table state at one version stored as
// actions, so that a reader need not replay every commit from version 0.
// The files below implement the three shapes the protocol defines:
//
//   - classic: one file, N.checkpoint.parquet
//   - multi-part: N.checkpoint.P.K.parquet for P in 1..K (read, not written)
//   - V2: N.checkpoint.UUID.json or .parquet holding the non-file actions
//     and sidecar actions that name Parquet files under _delta_log/_sidecars
//     holding the add and remove actions (read, not written)
//
// checkpoint_read.go decodes them, checkpoint_write.go writes classic ones,
// lastcheckpoint.go keeps the _last_checkpoint hint and logcleanup.go
// deletes the log files a checkpoint makes unnecessary.

// sidecarDir is the folder V2 checkpoints keep their sidecar files in.
const sidecarDir = LogDir + "/_sidecars"

// ckptName is a checkpoint file name taken apart.
type ckptName struct {
	version int64
	// part and parts are 1-based part numbers of a multi-part checkpoint;
	// 0 for any other shape.
	part, parts int
	// uuid is set for a V2 checkpoint's top-level file.
	uuid string
	// ext is "parquet" or "json".
	ext string
}

// ckptClassicPath is the storage path of the classic checkpoint of version v.
func ckptClassicPath(v int64) string {
	return fmt.Sprintf("%s/%020d.checkpoint.parquet", LogDir, v)
}

// ckptParseName parses the base name of a checkpoint file in _delta_log and
// reports whether it is one. Commits, _last_checkpoint, .crc and compacted
// files are not checkpoints.
func ckptParseName(base string) (ckptName, bool) {
	var n ckptName
	fields := strings.Split(base, ".")
	// The shortest is "V.checkpoint.parquet".
	if len(fields) < 3 || len(fields[0]) != 20 || !ckptDigits(fields[0]) || fields[1] != "checkpoint" {
		return n, false
	}
	v, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil || v < 0 {
		return n, false
	}
	n.version = v
	n.ext = fields[len(fields)-1]
	mid := fields[2 : len(fields)-1]
	switch {
	case len(mid) == 0 && n.ext == "parquet":
		return n, true
	case len(mid) == 1 && (n.ext == "parquet" || n.ext == "json") && ckptIsUUID(mid[0]):
		n.uuid = mid[0]
		return n, true
	case len(mid) == 2 && n.ext == "parquet" && len(mid[0]) == 10 && len(mid[1]) == 10 && ckptDigits(mid[0]) && ckptDigits(mid[1]):
		p, err1 := strconv.Atoi(mid[0])
		k, err2 := strconv.Atoi(mid[1])
		if err1 != nil || err2 != nil || p < 1 || k < 1 || p > k {
			return n, false
		}
		n.part, n.parts = p, k
		return n, true
	}
	return n, false
}

// ckptDigits reports whether s is all ASCII digits: the fixed-width
// numbers in log file names have no sign (strconv would accept "+1").
func ckptDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// ckptIsUUID reports whether s has the 8-4-4-4-12 hex shape of a UUID.
func ckptIsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// ckptSidecarPath resolves a sidecar action's path to a storage path. The
// protocol asks writers to store only the file name, relative to
// _delta_log/_sidecars; a relative path with folders is taken relative to
// the same folder.
func ckptSidecarPath(p string) (string, error) {
	rel, abs, err := DecodePath(p)
	if err != nil {
		return "", fmt.Errorf("resolve sidecar path: %w", err)
	}
	if abs {
		// Sidecars must live in this table's _sidecars folder, so an
		// absolute URI can only name a file there: keep its name.
		rel = path.Base(rel)
	}
	clean := path.Clean("/" + rel)
	if clean == "/" {
		return "", fmt.Errorf("resolve sidecar path %q: empty", p)
	}
	return sidecarDir + clean, nil
}
