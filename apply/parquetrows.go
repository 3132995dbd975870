package apply

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// ParquetRowFiles is RowFiles over the table's real Parquet data files.
type ParquetRowFiles struct {
	store   storage.Storage
	layout  *Layout
	file    datafile.Layout
	arrow   *arrow.Schema
	options []datafile.WriteOption
}

// NewParquetRowFiles reads and writes data files of a table of layout l.
func NewParquetRowFiles(store storage.Storage, l *Layout, opts ...datafile.WriteOption) (*ParquetRowFiles, error) {
	st := l.Schema()
	sch, err := datafile.ArrowSchema(st)
	if err != nil {
		return nil, fmt.Errorf("open data files of %s: %w", store.Location(), err)
	}
	return &ParquetRowFiles{store: store, layout: l, arrow: sch, options: opts,
		file: datafile.Layout{Schema: st, PartitionColumns: []string{}, Mapping: datafile.MappingNone, NumIndexedCols: 32}}, nil
}

// ReadRows implements RowFiles.
func (p *ParquetRowFiles) ReadRows(ctx context.Context, add *delta.Add) ([]Row, error) {
	rec, err := datafile.Read(ctx, p.store, p.file, add)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	rows, err := arrowToRows(rec, len(p.layout.Source))
	if err != nil {
		return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
	}
	return rows, nil
}

// WriteRows implements RowFiles.
func (p *ParquetRowFiles) WriteRows(ctx context.Context, rows []Row) (*delta.Add, error) {
	rec, err := rowsToArrow(p.arrow, len(p.layout.Source), rows)
	if err != nil {
		return nil, fmt.Errorf("write rows to %s: %w", p.store.Location(), err)
	}
	defer rec.Release()
	return datafile.Write(ctx, p.store, p.file, rec, map[string]*string{}, p.options...)
}
