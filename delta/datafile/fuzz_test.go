package datafile

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// FuzzReadParquet feeds corrupt Parquet files to the reader: it must
// return an error or a record, never panic or hang. Seeds are a file we
// write and small files Spark wrote.
func FuzzReadParquet(f *testing.F) {
	ctx := context.Background()
	dir := f.TempDir()
	l := allTypes(f, MappingNone)
	rec := sampleRecord(f, l, 5)
	pv := "p"
	add, err := Write(ctx, storage.NewLocal(dir), l, rec, map[string]*string{"part": &pv})
	rec.Release()
	if err != nil {
		f.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, add.Path)); err == nil {
		f.Add(b)
	}
	seeds, _ := filepath.Glob(filepath.Join(kernelData, "timestamp-truncation-stats", "*.parquet"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := ReadParquet(ctx, data)
		if err == nil {
			rec.Release()
		}
	})
}
