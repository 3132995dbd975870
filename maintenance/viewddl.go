package maintenance

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/tombstone"
)

// Dialect is a SQL engine a view is written for.
type Dialect string

// The dialects ViewDDL writes.
const (
	Spark  Dialect = "spark"
	Trino  Dialect = "trino"
	DuckDB Dialect = "duckdb"
)

// ViewOptions names the view and, for Trino, the table it reads.
type ViewOptions struct {
	// Name is the view's name, possibly qualified (catalog.schema.view).
	Name string
	// Location is the table's path or URI (Spark and DuckDB read it
	// directly).
	Location string
	// Table is the name the Trino Delta connector knows the table by
	// (catalog.schema.table); Trino cannot read a path.
	Table string
}

var qualifiedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ViewDDL returns the CREATE VIEW statement of the table's current view:
// live rows only (tombstones hidden) and the source columns listed one by
// one from the schema (engine columns hidden), so a column added later by
// schema drift does not appear in the view until it is recreated, and
// readers never see cdcapply's bookkeeping.
func ViewDDL(st delta.StructType, d Dialect, opts ViewOptions) (string, error) {
	if !qualifiedName.MatchString(opts.Name) {
		return "", fmt.Errorf("write view DDL: view name %q: want letters, digits and underscores, dot-separated", opts.Name)
	}
	if _, _, ok := st.Field(tombstone.ColDeleted); !ok {
		return "", fmt.Errorf("write view DDL: the table has no %s column: not a cdcapply table", tombstone.ColDeleted)
	}
	cols := tombstone.SourceColumns(st)
	if len(cols) == 0 {
		return "", fmt.Errorf("write view DDL: the table has no source columns")
	}
	var quote func(string) string
	var from string
	switch d {
	case Spark:
		quote = func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
		if opts.Location == "" {
			return "", fmt.Errorf("write view DDL: spark reads the table by path: the location is required")
		}
		from = "delta." + quote(opts.Location)
	case Trino:
		quote = func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
		if !qualifiedName.MatchString(opts.Table) {
			return "", fmt.Errorf("write view DDL: trino reads the table by name (catalog.schema.table), got %q", opts.Table)
		}
		from = opts.Table
	case DuckDB:
		quote = func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
		if opts.Location == "" {
			return "", fmt.Errorf("write view DDL: duckdb reads the table by path: the location is required")
		}
		from = "delta_scan('" + strings.ReplaceAll(opts.Location, "'", "''") + "')"
	default:
		return "", fmt.Errorf("write view DDL: unknown dialect %q (spark, trino or duckdb)", d)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE OR REPLACE VIEW %s AS\nSELECT\n", opts.Name)
	for i, c := range cols {
		sep := ","
		if i == len(cols)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "  %s%s\n", quote(c), sep)
	}
	fmt.Fprintf(&b, "FROM %s\nWHERE NOT %s;\n", from, quote(tombstone.ColDeleted))
	return b.String(), nil
}
