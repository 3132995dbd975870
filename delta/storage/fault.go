package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrInjected is returned by Faulty for an operation told to fail.
var ErrInjected = errors.New("injected storage fault")

// ErrCrashed is returned by Faulty for every operation after a simulated crash.
var ErrCrashed = errors.New("storage crashed (simulated)")

// OpKind names a storage operation.
type OpKind string

// The operations Faulty counts.
const (
	OpList          OpKind = "list"
	OpStat          OpKind = "stat"
	OpRead          OpKind = "read"
	OpWriteIfAbsent OpKind = "write-if-absent"
	OpWrite         OpKind = "write"
	OpDelete        OpKind = "delete"
)

// Op is one operation seen by Faulty, in order. N starts at 1.
type Op struct {
	N    int
	Kind OpKind
	Path string
	Err  error
}

func (o Op) String() string {
	if o.Err != nil {
		return fmt.Sprintf("#%d %s %s: %v", o.N, o.Kind, o.Path, o.Err)
	}
	return fmt.Sprintf("#%d %s %s", o.N, o.Kind, o.Path)
}

// Fault says what Faulty does with one operation.
type Fault int

const (
	// Pass lets the operation through.
	Pass Fault = iota
	// Fail returns ErrInjected without performing the operation.
	Fail
	// CrashBefore crashes before the operation takes effect.
	CrashBefore
	// CrashAfter performs the operation, then crashes (the caller sees ErrCrashed).
	CrashAfter
)

// Faulty wraps a Storage, logs every operation and injects failures and
// crashes chosen by a rule. After a crash every later operation fails with
// ErrCrashed until Restart, as if the process had died: what reached the
// inner storage stays, nothing else does.
type Faulty struct {
	inner Storage

	mu      sync.Mutex // guards the fields below
	n       int
	ops     []Op
	rule    func(Op) Fault
	crashed bool
}

// NewFaulty wraps inner; with no rule every operation passes.
func NewFaulty(inner Storage) *Faulty { return &Faulty{inner: inner} }

// SetRule installs the function that decides each operation's fate.
func (f *Faulty) SetRule(rule func(Op) Fault) {
	f.mu.Lock()
	f.rule = rule
	f.mu.Unlock()
}

// CrashAt crashes at operation n (1-based), before or after it takes effect.
func (f *Faulty) CrashAt(n int, after bool) {
	f.SetRule(func(op Op) Fault {
		if op.N != n {
			return Pass
		}
		if after {
			return CrashAfter
		}
		return CrashBefore
	})
}

// FailAt makes operation n fail once with ErrInjected.
func (f *Faulty) FailAt(n int) {
	f.SetRule(func(op Op) Fault {
		if op.N == n {
			return Fail
		}
		return Pass
	})
}

// Crashed reports whether a crash was simulated.
func (f *Faulty) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Restart clears the crash and the rule, as a new process would start; the
// operation log and counter go on.
func (f *Faulty) Restart() {
	f.mu.Lock()
	f.crashed = false
	f.rule = nil
	f.mu.Unlock()
}

// Ops returns a copy of the operation log.
func (f *Faulty) Ops() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Op(nil), f.ops...)
}

// Count returns how many operations were attempted.
func (f *Faulty) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// Location implements Storage.
func (f *Faulty) Location() string { return f.inner.Location() }

// do runs one operation under the rule. It holds no lock across the I/O.
func (f *Faulty) do(kind OpKind, p string, run func() error) error {
	f.mu.Lock()
	f.n++
	op := Op{N: f.n, Kind: kind, Path: p}
	if f.crashed {
		op.Err = ErrCrashed
		f.ops = append(f.ops, op)
		f.mu.Unlock()
		return fmt.Errorf("%s %s: %w", kind, p, ErrCrashed)
	}
	fault := Pass
	if f.rule != nil {
		fault = f.rule(op)
	}
	if fault == CrashBefore {
		f.crashed = true
	}
	f.mu.Unlock()

	var err error
	switch fault {
	case Fail:
		err = fmt.Errorf("%s %s: %w", kind, p, ErrInjected)
	case CrashBefore:
		err = fmt.Errorf("%s %s: %w", kind, p, ErrCrashed)
	case CrashAfter:
		_ = run()
		err = fmt.Errorf("%s %s: %w", kind, p, ErrCrashed)
	default:
		err = run()
	}

	f.mu.Lock()
	if fault == CrashAfter {
		f.crashed = true
	}
	op.Err = err
	f.ops = append(f.ops, op)
	f.mu.Unlock()
	return err
}

// List implements Storage.
func (f *Faulty) List(ctx context.Context, dir string) ([]FileInfo, error) {
	var out []FileInfo
	err := f.do(OpList, dir, func() (err error) { out, err = f.inner.List(ctx, dir); return err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Stat implements Stater.
func (f *Faulty) Stat(ctx context.Context, p string) (FileInfo, error) {
	var out FileInfo
	err := f.do(OpStat, p, func() (err error) { out, err = Stat(ctx, f.inner, p); return err })
	return out, err
}

// Read implements Storage.
func (f *Faulty) Read(ctx context.Context, p string) ([]byte, error) {
	var out []byte
	err := f.do(OpRead, p, func() (err error) { out, err = f.inner.Read(ctx, p); return err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WriteIfAbsent implements Storage.
func (f *Faulty) WriteIfAbsent(ctx context.Context, p string, data []byte) error {
	return f.do(OpWriteIfAbsent, p, func() error { return f.inner.WriteIfAbsent(ctx, p, data) })
}

// Write implements Storage.
func (f *Faulty) Write(ctx context.Context, p string, data []byte) error {
	return f.do(OpWrite, p, func() error { return f.inner.Write(ctx, p, data) })
}

// WriteFrom implements StreamWriter as one write-if-absent or write
// operation, streamed into the inner storage when it streams.
func (f *Faulty) WriteFrom(ctx context.Context, p string, ifAbsent bool, fill func(io.Writer) error) (int64, error) {
	kind := OpWrite
	if ifAbsent {
		kind = OpWriteIfAbsent
	}
	var n int64
	err := f.do(kind, p, func() (err error) { n, err = WriteFrom(ctx, f.inner, p, ifAbsent, fill); return err })
	return n, err
}

// Delete implements Storage.
func (f *Faulty) Delete(ctx context.Context, p string) error {
	return f.do(OpDelete, p, func() error { return f.inner.Delete(ctx, p) })
}
