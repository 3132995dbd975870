package apply

import (
	"reflect"
	"testing"
)

// TestCountsAdd: Counts.add, which sums the per-file counts of a
// merge-on-read plan, adds every field.
func TestCountsAdd(t *testing.T) {
	var o Counts
	v := reflect.ValueOf(&o).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	c := o
	c.add(o)
	w := reflect.ValueOf(c)
	for i := range w.NumField() {
		if got := w.Field(i).Int(); got != int64(2*(i+1)) {
			t.Errorf("%s: %d after adding %d to itself", w.Type().Field(i).Name, got, i+1)
		}
	}
}
