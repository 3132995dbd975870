package schema

import (
	"testing"
	"unsafe"
)

// TestCloneDetaches: a cloned value shares no bytes with the buffer its
// text was read from, nested elements included, and keeps its contents.
func TestCloneDetaches(t *testing.T) {
	buf := []byte("hello world")
	text := unsafe.String(&buf[0], 5)
	v := List(String(text), Struct(Int(1), String(unsafe.String(&buf[6], 5))))
	c := v.Clone()
	copy(buf, "XXXXXXXXXXX")
	if got := c.Elems()[0].S; got != "hello" {
		t.Fatalf("cloned text changed with its source buffer: %q", got)
	}
	if got := c.Elems()[1].Elems()[1].S; got != "world" {
		t.Fatalf("cloned nested text changed with its source buffer: %q", got)
	}
	if v.Elems()[0].S != "XXXXX" {
		t.Fatalf("the original should alias the buffer (test setup): %q", v.Elems()[0].S)
	}
}
