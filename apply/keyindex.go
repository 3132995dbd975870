package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"unsafe"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// KeyIndex maps every key of a table to where its current row lives (file,
// physical row index) and what it holds (sequence, deleted), so a batch
// finds the rows it changes without scanning the table and decides stale
// changes without reading any file.
//
// It is laid out for memory, not for convenience: a Go map[string]struct
// costs ~175 bytes per key (BenchmarkKeyIndex), too much for tens of
// millions of keys. Here the key and sequence bytes of every entry sit in
// one arena, the entries in chunks of 16-byte records (entryTable), and an
// open-addressing table of 8-byte slots (linear probing, load at most 3/4)
// finds an entry by the key's hash. A slot keeps 32 bits of the key's hash
// beside the entry index, so a probe that lands on another key's slot is
// passed over without touching that entry or its arena record (at ten
// million keys each of those is a cache and TLB miss). A hash only picks
// where to look: a probe whose hash bits match still compares the full key
// bytes, so two keys never merge. The three buffers are advised onto huge
// pages (hugepages_linux.go).
type KeyIndex struct {
	layout *Layout
	seed   maphash.Seed
	// slots hold, low half, entry index + 1 (0: empty) and, high half,
	// the low 32 bits of the key's hash (its tag); len is a power of two,
	// and a key's home slot is its hash's low bits. The tag holds the home
	// of every table of up to 2^32 slots, so growing the table moves the
	// slots without reading a key (grow).
	slots   []uint64
	entries entryTable
	// arena holds, per entry, uvarint(len key) key uvarint(len seq) seq.
	arena keyArena
	// garbage counts arena bytes no entry points at any more (a sequence
	// that changed length moved its record to the end, a chunk's tail a
	// record did not fit in).
	garbage int
	// tombstones counts the entries whose row is deleted (kept by insert
	// and set, the only writers of an entry's flag).
	tombstones int

	files  []*delta.Add // by fileID; nil once a file is gone
	byPath map[string]fileID

	// touched keeps touchGroup's reads from being optimised away.
	touched byte
}

// indexEntry is one key's place: its arena record, file and row.
type indexEntry struct {
	// off is the arena offset of the key's record; the top bit is the
	// deleted flag of the stored row.
	off  uint64
	file fileID
	row  uint32
}

const deletedBit = 1 << 63

// entryState is an entry decoded for use: the sequence aliases the arena
// and is valid until the index changes.
type entryState struct {
	seq     []byte
	deleted bool
	file    fileID
	row     int64
}

// NewKeyIndex returns an empty index for a layout.
func NewKeyIndex(l *Layout) *KeyIndex {
	return &KeyIndex{layout: l, seed: maphash.MakeSeed(), slots: make([]uint64, 16), byPath: map[string]fileID{}}
}

// KeyReader is an optional RowFiles capability: reading only what the key
// index needs (key columns, sequence, deleted flag) of a file's live rows,
// with their physical row index. BuildKeyIndex uses it when present.
type KeyReader interface {
	ReadKeys(ctx context.Context, add *delta.Add, fn func(key string, seq []byte, deleted bool, pos int64) error) error
}

// BuildKeyIndex reads every live file of a snapshot once (only the key,
// sequence and deleted columns when rf is a KeyReader). A key found in two
// rows means the table was written by someone else or is corrupt:
// applying on top would double rows, so it is an error.
func BuildKeyIndex(ctx context.Context, l *Layout, snap *delta.Snapshot, rf RowFiles) (*KeyIndex, error) {
	return buildKeyIndex(ctx, l, snap, rf, nil)
}

// BuildProgress is told, as a key index build starts (filesRead 0) and
// after each file it read, how many of the table's files it has read and
// how many keys it holds.
type BuildProgress func(filesRead, files, keys int)

func buildKeyIndex(ctx context.Context, l *Layout, snap *delta.Snapshot, rf RowFiles, progress BuildProgress) (*KeyIndex, error) {
	ix := NewKeyIndex(l)
	files := snap.Files()
	var rows int64
	for _, add := range files {
		rows += numRecords(add)
	}
	ix.reserve(int(rows))
	if progress != nil {
		progress(0, len(files), 0)
	}
	// One goroutine reads the files' keys in order while this one inserts
	// what it read before: reading (decoding the key, sequence and
	// deleted columns) and inserting (mostly cache misses in a large
	// index) take about as long as each other, and a restart waits for
	// both. The keys travel in blocks of at most blockRows rows, three in
	// all, whatever the files' sizes.
	ctx, cancel := context.WithCancel(ctx)
	const blocks = 3
	read := make(chan *keyBlock, blocks) // holds every block: sends never block
	free := make(chan *keyBlock, blocks)
	for range blocks {
		free <- new(keyBlock)
	}
	go readKeyBlocks(ctx, l, rf, files, free, read)
	defer func() {
		// Nothing of the build outlives it: a failed build stops the
		// reader and waits for it to close read.
		cancel()
		for range read {
		}
	}()
	cur, id := -1, noFile
	for done := 0; done < len(files); {
		b, ok := <-read
		if !ok { // the reader stops early only when ctx is done
			return nil, fmt.Errorf("build key index: %w", context.Cause(ctx))
		}
		if b.err != nil {
			return nil, fmt.Errorf("build key index: %w", b.err)
		}
		add := files[b.file]
		if b.file != cur {
			cur, id = b.file, ix.addFile(add)
		}
		for from := 0; from < b.len(); from += buildGroup {
			if err := ix.insertGroup(b, from, min(from+buildGroup, b.len()), id, add.Path); err != nil {
				return nil, fmt.Errorf("build key index: %w", err)
			}
		}
		last := b.last
		free <- b
		if last {
			done++
			if progress != nil {
				progress(done, len(files), ix.Len())
			}
		}
	}
	return ix, nil
}

// buildGroup is how many keys a build looks up together (insertGroup).
const buildGroup = 16

// blockRows is the most rows a keyBlock holds (tests lower it).
var blockRows = 1 << 16

// keyBlock is what a build read of consecutive rows of one file: each
// live row's key, sequence, deleted flag and physical row, copied (a
// file reader reuses its buffers from row to row).
type keyBlock struct {
	file    int      // index of the file in the build's list
	last    bool     // the file's last block (a file without live rows has one, empty)
	buf     []byte   // each row's key, then its sequence
	ends    []uint64 // per row: where its key ends in buf (high half) and its sequence (low half)
	deleted []bool
	pos     []int64
	err     error // reading the file failed: the build fails with it
}

func (b *keyBlock) reset(file int) {
	b.file, b.last, b.err = file, false, nil
	b.buf, b.ends, b.deleted, b.pos = b.buf[:0], b.ends[:0], b.deleted[:0], b.pos[:0]
}

func (b *keyBlock) len() int { return len(b.ends) }

// add appends a row.
func (b *keyBlock) add(key string, seq []byte, deleted bool, pos int64) error {
	if len(b.buf)+len(key)+len(seq) > math.MaxUint32 {
		return fmt.Errorf("a block's keys and sequences exceed %d bytes", uint64(math.MaxUint32))
	}
	b.buf = append(b.buf, key...)
	k := len(b.buf)
	b.buf = append(b.buf, seq...)
	b.ends = append(b.ends, uint64(k)<<32|uint64(len(b.buf)))
	b.deleted = append(b.deleted, deleted)
	b.pos = append(b.pos, pos)
	return nil
}

// readKeyBlocks reads files' keys, in order, into blocks taken from free
// and sent to read, the last of each file marked, and closes read when
// done. A file that fails to read is sent as a block with its error, and
// reading stops there; a done ctx stops it too.
func readKeyBlocks(ctx context.Context, l *Layout, rf RowFiles, files []*delta.Add, free <-chan *keyBlock, read chan<- *keyBlock) {
	defer close(read)
	take := func(file int) *keyBlock {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case b := <-free:
			b.reset(file)
			return b
		case <-ctx.Done():
			return nil
		}
	}
	for n, add := range files {
		b := take(n)
		if b == nil {
			return
		}
		err := readFileKeys(ctx, l, rf, add, func(key string, seq []byte, deleted bool, pos int64) error {
			if b.len() == blockRows {
				read <- b
				if b = take(n); b == nil {
					return context.Cause(ctx)
				}
			}
			return b.add(key, seq, deleted, pos)
		})
		if b == nil {
			return
		}
		b.last, b.err = true, err
		read <- b
		if err != nil {
			return
		}
	}
}

// row returns row j's key (aliasing the block's buffer) and sequence.
func (b *keyBlock) row(j int) (string, []byte) {
	from := 0
	if j > 0 {
		from = int(b.ends[j-1] & 0xffffffff)
	}
	k, s := int(b.ends[j]>>32), int(b.ends[j]&0xffffffff)
	return unsafe.String(unsafe.SliceData(b.buf[from:]), k-from), b.buf[k:s:s]
}

// insertGroup adds rows [from, to) of b (at most buildGroup), keys the
// index must not hold yet (path names their file in the error when one
// does). As findGroup does for a batch's lookups, it first hashes every
// key and reads its first slot, loads that do not depend on each other,
// so the processor has the group's cache misses in flight together; the
// lookups and inserts that follow find the slots in cache. A large
// table's index build was mostly these misses taken one after another.
func (ix *KeyIndex) insertGroup(b *keyBlock, from, to int, file fileID, path string) error {
	var hashes [buildGroup]uint64
	var sink uint64
	mask := uint64(len(ix.slots) - 1)
	for j := from; j < to; j++ {
		key, _ := b.row(j)
		hashes[j-from] = maphash.String(ix.seed, key)
		sink += ix.slots[hashes[j-from]&mask]
	}
	ix.touched = byte(sink)
	for j := from; j < to; j++ {
		key, seq := b.row(j)
		if _, dup := ix.findHashed(key, hashes[j-from]); dup {
			return fmt.Errorf("key %s is in more than one row (file %s)", ix.renderKey(key), path)
		}
		if err := ix.insertHashed(key, hashes[j-from], seq, b.deleted[j], file, b.pos[j]); err != nil {
			return err
		}
	}
	return nil
}

// readFileKeys calls put for every live row of a file with what the key
// index keeps of it: only the key, sequence and deleted columns when rf
// is a KeyReader, else whole rows.
func readFileKeys(ctx context.Context, l *Layout, rf RowFiles, add *delta.Add, put func(key string, seq []byte, deleted bool, pos int64) error) error {
	if kr, projected := rf.(KeyReader); projected {
		return kr.ReadKeys(ctx, add, put)
	}
	rs, err := rf.ReadRows(ctx, add)
	if err != nil {
		return err
	}
	for i, r := range rs {
		pos := int64(i)
		if add.DeletionVector != nil {
			pos = r.Pos
		}
		if err := put(EncodeKey(r.Values, l.Key), r.Seq, r.Deleted, pos); err != nil {
			return err
		}
	}
	return nil
}

// numRecords is a file's row count from its statistics, 0 when unknown.
func numRecords(a *delta.Add) int64 {
	const field = `"numRecords":`
	i := bytes.Index([]byte(a.Stats), []byte(field))
	if i < 0 {
		return 0
	}
	var n int64
	for _, c := range []byte(a.Stats[i+len(field):]) {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// filesCompactMin is the number of file ids below which compactFiles
// leaves them be (tests lower it).
var filesCompactMin = 1024

// compactFiles numbers the live files from 0 again once gone files hold
// most of the ids: every batch with a new file takes an id, and a folded,
// optimized or purged file's stays behind as nil, so a stream running for
// weeks would otherwise carry millions of them, in memory and in every
// batch's pass over the files (foldCandidates) and every catch-up's. It
// rewrites each entry's file, a pass over the index, so it runs at most
// once per as many batches as there are live files (and filesCompactMin).
// Only between batches: a plan names files by id.
func (ix *KeyIndex) compactFiles() {
	live := len(ix.byPath)
	if len(ix.files) < filesCompactMin || len(ix.files) < 2*live {
		return
	}
	remap := make([]fileID, len(ix.files))
	files := make([]*delta.Add, 0, live)
	for id, a := range ix.files {
		remap[id] = noFile
		if a != nil {
			remap[id] = fileID(len(files))
			files = append(files, a)
		}
	}
	for i := range ix.entries.n {
		e := ix.entries.at(i)
		if e.file >= 0 && int(e.file) < len(remap) {
			e.file = remap[e.file]
		}
	}
	ix.files = files
	for id, a := range files {
		ix.byPath[a.Path] = fileID(id)
	}
}

func (ix *KeyIndex) addFile(a *delta.Add) fileID {
	id := fileID(len(ix.files))
	ix.files = append(ix.files, a)
	ix.byPath[a.Path] = id
	return id
}

// Len returns the number of keys, tombstones included.
func (ix *KeyIndex) Len() int { return ix.entries.n }

// Tombstones is the number of keys whose row is a tombstone (soft-deleted).
func (ix *KeyIndex) Tombstones() int { return ix.tombstones }

// slotsFor is the size of the slot table a build makes for n keys: the
// smallest power of two, 16 at least, whose load with n keys is at most
// 3/4 (the load at which insert doubles it).
func slotsFor(n int) int {
	size := 16
	for size*3/4 < n {
		size *= 2
	}
	return size
}

// reserve sizes the slot table for n keys without regrowing.
func (ix *KeyIndex) reserve(n int) {
	size := len(ix.slots)
	for size*3/4 < n {
		size *= 2
	}
	if size != len(ix.slots) {
		ix.rehash(size)
	}
	ix.entries.reserve(n)
}

// makeBig allocates a slice of n zeroed elements (capacity c) advised onto
// huge pages.
func makeBig[T any](n, c int) []T {
	s := make([]T, n, c)
	if c > 0 {
		var zero T
		adviseHugePages(unsafe.Pointer(unsafe.SliceData(s)), c*int(unsafe.Sizeof(zero)))
	}
	return s
}

// regrow returns a copy of s with capacity c (on huge pages): how the
// first chunk of the index's entries and arena grows while it is short.
func regrow[T any](s []T, c int) []T {
	g := makeBig[T](len(s), c)
	copy(g, s)
	return g
}

// entryTable holds the index's entries: a first chunk that grows by
// doubling up to entryChunk entries, then chunks of entryChunk entries
// allocated whole. Appending never copies more than the first chunk, so
// no insert pays for copying a large index (at 10M keys a one-slice
// table's growth copied 160 MB inside one batch, and held both copies
// while it did).
type entryTable struct {
	chunks [][]indexEntry
	n      int
}

const (
	entryChunkShift = 20
	entryChunk      = 1 << entryChunkShift // 16 MiB of entries
)

func (t *entryTable) at(i int) *indexEntry {
	return &t.chunks[i>>entryChunkShift][i&(entryChunk-1)]
}

func (t *entryTable) append(e indexEntry) {
	k := t.n >> entryChunkShift
	if k == len(t.chunks) {
		c := entryChunk
		if k == 0 {
			c = 1024
		}
		t.chunks = append(t.chunks, makeBig[indexEntry](0, c))
	}
	ch := &t.chunks[k]
	if len(*ch) == cap(*ch) { // only the first chunk is ever short
		*ch = regrow(*ch, min(2*cap(*ch), entryChunk))
	}
	*ch = append(*ch, e)
	t.n++
}

// pop drops the last entry; a chunk it leaves empty is released (the
// first is kept).
func (t *entryTable) pop() {
	t.n--
	k := t.n >> entryChunkShift
	t.chunks[k] = t.chunks[k][:len(t.chunks[k])-1]
	if k > 0 && len(t.chunks[k]) == 0 {
		t.chunks[k] = nil
		t.chunks = t.chunks[:k]
	}
}

// reserve makes room for n entries in all.
func (t *entryTable) reserve(n int) {
	if n <= t.n {
		return
	}
	if len(t.chunks) == 0 {
		t.chunks = append(t.chunks, makeBig[indexEntry](0, min(max(n, 1024), entryChunk)))
	} else if first := &t.chunks[0]; cap(*first) < entryChunk && cap(*first) < n {
		*first = regrow(*first, min(n, entryChunk))
	}
	for len(t.chunks)*entryChunk < n {
		t.chunks = append(t.chunks, makeBig[indexEntry](0, entryChunk))
	}
}

// capacity is how many entries fit without allocating.
func (t *entryTable) capacity() int {
	if len(t.chunks) == 0 {
		return 0
	}
	return (len(t.chunks)-1)*entryChunk + cap(t.chunks[len(t.chunks)-1])
}

// keyArena holds the index's key and sequence records as entryTable
// holds its entries: a first chunk that grows by doubling up to
// arenaChunk bytes, then chunks of arenaChunk bytes allocated whole. A
// record never spans two chunks: one that does not fit in the last
// chunk's tail starts the next chunk, and the tail is garbage. So a
// growing table never copies more than the first chunk and never holds
// two copies of its arena (a one-slice arena, grown by a quarter at a
// time, copied all of it at each step: about 0.2 s of the 1M-key bench's
// inserts, and at 10M keys 300-odd MB held twice while it did).
//
// An offset is the chunk's index times arenaChunk plus the record's
// position in its chunk.
type keyArena struct {
	chunks [][]byte
}

const (
	arenaChunkShift = 24
	arenaChunk      = 1 << arenaChunkShift // 16 MiB
)

// at returns the arena from off to the end of its chunk.
func (a *keyArena) at(off uint64) []byte {
	return a.chunks[off>>arenaChunkShift][off&(arenaChunk-1):]
}

// holds reports whether off is inside a record written to the arena.
func (a *keyArena) holds(off uint64) bool {
	k := off >> arenaChunkShift
	return k < uint64(len(a.chunks)) && off&(arenaChunk-1) < uint64(len(a.chunks[k]))
}

// size is the arena's extent: the offset the next record would take if
// it fits, every skipped chunk tail included.
func (a *keyArena) size() int {
	if len(a.chunks) == 0 {
		return 0
	}
	last := len(a.chunks) - 1
	return last*arenaChunk + len(a.chunks[last])
}

// arenaAppend writes a record of key and seq to a and returns its offset and the
// bytes of a chunk's tail it skipped (garbage from now on).
func arenaAppend[K string | []byte](a *keyArena, key K, seq []byte) (off uint64, skipped int, err error) {
	need := recordLen(len(key), len(seq))
	if need > arenaChunk {
		return 0, 0, fmt.Errorf("key index: a key of %d bytes with a sequence of %d does not fit an arena chunk of %d bytes", len(key), len(seq), arenaChunk)
	}
	last := len(a.chunks) - 1
	switch {
	case last < 0:
		a.chunks = append(a.chunks, makeBig[byte](0, max(4096, need)))
		last = 0
	case cap(a.chunks[last])-len(a.chunks[last]) >= need:
	case last == 0 && len(a.chunks[0])+need <= arenaChunk:
		// The first chunk, still growing: double it (or more, for a
		// long record), at most to a whole chunk.
		first := a.chunks[0]
		a.chunks[0] = regrow(first, min(max(2*cap(first), len(first)+need), arenaChunk))
	default:
		if uint64(last+1) >= deletedBit>>arenaChunkShift {
			return 0, 0, fmt.Errorf("key index arena exceeds 2^63 bytes")
		}
		skipped = arenaChunk - len(a.chunks[last])
		a.chunks = append(a.chunks, makeBig[byte](0, arenaChunk))
		last++
	}
	c := a.chunks[last]
	off = uint64(last)<<arenaChunkShift | uint64(len(c))
	c = binary.AppendUvarint(c, uint64(len(key)))
	c = append(c, key...)
	c = binary.AppendUvarint(c, uint64(len(seq)))
	a.chunks[last] = append(c, seq...)
	return off, skipped, nil
}

// slot packs an entry index and the key's hash into a slot.
func slot(i int, h uint64) uint64 { return tagOf(h) | uint64(i+1) }

// tagOf is the part of a hash a slot keeps: its low 32 bits, in the
// slot's high half.
func tagOf(h uint64) uint64 { return h << 32 }

// grow doubles the slot table, placing each slot by the hash bits its tag
// holds: no key is read or hashed again, where rehash reads every key's
// arena record, a cache miss each in a large index (growing to 1M keys
// spent 0.29 s of the 1M-key bench's engine CPU there).
func (ix *KeyIndex) grow() {
	size := 2 * len(ix.slots)
	if size > 1<<32 {
		ix.rehash(size) // the tag no longer holds the whole home
		return
	}
	old := ix.slots
	ix.slots = makeBig[uint64](size, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		h := s >> 32 & mask
		for ix.slots[h] != 0 {
			h = (h + 1) & mask
		}
		ix.slots[h] = s
	}
}

func (ix *KeyIndex) rehash(size int) {
	ix.slots = makeBig[uint64](size, size)
	mask := uint64(size - 1)
	for i := range ix.entries.n {
		hash := maphash.Bytes(ix.seed, ix.keyBytes(i))
		h := hash & mask
		for ix.slots[h] != 0 {
			h = (h + 1) & mask
		}
		ix.slots[h] = slot(i, hash)
	}
}

// find returns the entry index of key.
func (ix *KeyIndex) find(key string) (int, bool) {
	return ix.findHashed(key, maphash.String(ix.seed, key))
}

// findHashed is find of a key whose hash the caller has.
func (ix *KeyIndex) findHashed(key string, hash uint64) (int, bool) {
	mask := uint64(len(ix.slots) - 1)
	tag := tagOf(hash)
	h := hash & mask
	for {
		s := ix.slots[h]
		if s == 0 {
			return 0, false
		}
		if s&^0xffffffff == tag {
			i := int(s&0xffffffff) - 1
			if string(ix.keyBytes(i)) == key {
				return i, true
			}
		}
		h = (h + 1) & mask
	}
}

// record returns the key and sequence bytes of entry i (arena aliases).
func (ix *KeyIndex) record(i int) (key, seq []byte) {
	rec := ix.arena.at(ix.entries.at(i).off &^ deletedBit)
	kl, n := binary.Uvarint(rec)
	key = rec[n : n+int(kl) : n+int(kl)]
	rec = rec[n+int(kl):]
	sl, n := binary.Uvarint(rec)
	return key, rec[n : n+int(sl) : n+int(sl)]
}

// recordKeyIs reports whether the arena record at off (an entry's off,
// the deleted flag included) holds key.
func (ix *KeyIndex) recordKeyIs(off uint64, key string) bool {
	rec := ix.arena.at(off &^ deletedBit)
	kl, n := binary.Uvarint(rec)
	return kl == uint64(len(key)) && string(rec[n:n+int(kl)]) == key
}

func (ix *KeyIndex) keyBytes(i int) []byte {
	k, _ := ix.record(i)
	return k
}

// state decodes entry i.
func (ix *KeyIndex) state(i int) entryState {
	_, seq := ix.record(i)
	e := ix.entries.at(i)
	return entryState{seq: seq, deleted: e.off&deletedBit != 0, file: e.file, row: int64(e.row)}
}

// lookup returns the state of key's entry.
func (ix *KeyIndex) lookup(key string) (entryState, bool) {
	i, ok := ix.find(key)
	if !ok {
		return entryState{}, false
	}
	return ix.state(i), true
}

// has reports whether the table holds key (a tombstone counts).
func (ix *KeyIndex) has(key string) bool {
	_, ok := ix.find(key)
	return ok
}

func (ix *KeyIndex) appendRecord(key string, seq []byte) (uint64, error) {
	off, skipped, err := arenaAppend(&ix.arena, key, seq)
	ix.garbage += skipped
	return off, err
}

func packEntry(off uint64, deleted bool, file fileID, pos int64) (indexEntry, error) {
	if pos < 0 || pos > math.MaxUint32 {
		return indexEntry{}, fmt.Errorf("row index %d is out of the key index's range", pos)
	}
	if deleted {
		off |= deletedBit
	}
	return indexEntry{off: off, file: file, row: uint32(pos)}, nil
}

// insert adds a key the index does not hold.
func (ix *KeyIndex) insert(key string, seq []byte, deleted bool, file fileID, pos int64) error {
	return ix.insertHashed(key, maphash.String(ix.seed, key), seq, deleted, file, pos)
}

// insertHashed is insert of a key whose hash the caller has.
func (ix *KeyIndex) insertHashed(key string, hash uint64, seq []byte, deleted bool, file fileID, pos int64) error {
	if ix.entries.n >= math.MaxUint32-1 {
		return fmt.Errorf("key index holds %d keys, its limit", ix.entries.n)
	}
	off, err := ix.appendRecord(key, seq)
	if err != nil {
		return err
	}
	e, err := packEntry(off, deleted, file, pos)
	if err != nil {
		return fmt.Errorf("key %s: %w", ix.renderKey(key), err)
	}
	ix.entries.append(e)
	if deleted {
		ix.tombstones++
	}
	if ix.entries.n > len(ix.slots)*3/4 {
		ix.grow() // the new entry's slot is still to place, below
	}
	mask := uint64(len(ix.slots) - 1)
	h := hash & mask
	for ix.slots[h] != 0 {
		h = (h + 1) & mask
	}
	ix.slots[h] = slot(ix.entries.n-1, hash)
	return nil
}

// set points entry i at a new row. A sequence of the old length is
// overwritten in place (the usual case: one connector, one shape); another
// length moves the record to the end of the arena, and the arena is
// compacted once more than half of it is garbage.
func (ix *KeyIndex) set(i int, seq []byte, deleted bool, file fileID, pos int64) error {
	key, old := ix.record(i)
	off := ix.entries.at(i).off &^ deletedBit
	if len(old) == len(seq) {
		copy(old, seq)
	} else {
		ix.garbage += recordLen(len(key), len(old))
		var err error
		if off, err = ix.appendRecord(string(key), seq); err != nil {
			return err
		}
	}
	e, err := packEntry(off, deleted, file, pos)
	if err != nil {
		return fmt.Errorf("key %s: %w", ix.renderKey(string(key)), err)
	}
	if was := ix.entries.at(i).off&deletedBit != 0; was != deleted {
		if deleted {
			ix.tombstones++
		} else {
			ix.tombstones--
		}
	}
	*ix.entries.at(i) = e
	if ix.garbage > 1<<20 && ix.garbage > ix.arena.size()/2 {
		return ix.compact()
	}
	return nil
}

func recordLen(k, s int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(k)) + k + binary.PutUvarint(b[:], uint64(s)) + s
}

// compact copies the live records into a fresh arena. Every record was
// appended before, so each fits a chunk.
func (ix *KeyIndex) compact() error {
	var arena keyArena
	garbage := 0
	for i := range ix.entries.n {
		key, seq := ix.record(i)
		off, skipped, err := arenaAppend(&arena, key, seq)
		if err != nil {
			return err
		}
		garbage += skipped
		e := ix.entries.at(i)
		e.off = off | e.off&deletedBit
	}
	ix.arena, ix.garbage = arena, garbage
	return nil
}

// slotOf returns the position in slots of entry i, whose key is key.
func (ix *KeyIndex) slotOf(i int, key []byte) uint64 {
	mask := uint64(len(ix.slots) - 1)
	h := maphash.Bytes(ix.seed, key) & mask
	for ix.slots[h]&0xffffffff != uint64(i+1) {
		h = (h + 1) & mask
	}
	return h
}

// remove drops entry i, for a key the table no longer holds (a purge).
// Its slot is emptied and the slots after it in the same probe run move
// back where their key may sit (linear probing's deletion by backward
// shift: find stops at the first empty slot, so no run may have a hole
// before a key that belongs after it); the last entry takes index i, and
// the key's arena record becomes garbage.
func (ix *KeyIndex) remove(i int) error {
	key, seq := ix.record(i)
	ix.garbage += recordLen(len(key), len(seq))
	if ix.entries.at(i).off&deletedBit != 0 {
		ix.tombstones--
	}
	mask := uint64(len(ix.slots) - 1)
	hole := ix.slotOf(i, key)
	for j := (hole + 1) & mask; ix.slots[j] != 0; j = (j + 1) & mask {
		s := ix.slots[j]
		home := maphash.Bytes(ix.seed, ix.keyBytes(int(s&0xffffffff)-1)) & mask
		// s may fill the hole unless its home lies cyclically in (hole, j]:
		// then the hole is before where find starts looking for it.
		inRun := home > hole && home <= j
		if j < hole { // the run wrapped around the table's end
			inRun = home > hole || home <= j
		}
		if !inRun {
			ix.slots[hole] = s
			hole = j
		}
	}
	ix.slots[hole] = 0
	if last := ix.entries.n - 1; i != last {
		h := ix.slotOf(last, ix.keyBytes(last))
		ix.slots[h] = ix.slots[h]&^0xffffffff | uint64(i+1)
		*ix.entries.at(i) = *ix.entries.at(last)
	}
	ix.entries.pop()
	if ix.garbage > 1<<20 && ix.garbage > ix.arena.size()/2 {
		return ix.compact()
	}
	return nil
}

// upsert sets key's entry, inserting it when new.
func (ix *KeyIndex) upsert(key string, seq []byte, deleted bool, file fileID, pos int64) error {
	if i, ok := ix.find(key); ok {
		return ix.set(i, seq, deleted, file, pos)
	}
	return ix.insert(key, seq, deleted, file, pos)
}

// renderKey shows a canonical key for error messages.
func (ix *KeyIndex) renderKey(key string) string {
	vals, err := DecodeKey(key, len(ix.layout.Key))
	if err != nil {
		return fmt.Sprintf("%x", key)
	}
	full := make([]schema.Value, len(ix.layout.Source))
	for i, k := range ix.layout.Key {
		full[k] = vals[i]
	}
	return ix.render(full)
}

func (ix *KeyIndex) render(values []schema.Value) string {
	var b bytes.Buffer
	for i, k := range ix.layout.Key {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%v", ix.layout.Source[k].Name, values[k].GoString())
	}
	return b.String()
}

// DecodeKey reads back n values from a canonical key (EncodeKey's
// inverse, for messages: a decimal comes back without its scale).
func DecodeKey(key string, n int) ([]schema.Value, error) {
	b := []byte(key)
	out := make([]schema.Value, 0, n)
	for i := 0; i < n; i++ {
		v, rest, err := decodeKeyValue(b)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		b = rest
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("decode key: %d trailing bytes", len(b))
	}
	return out, nil
}

func decodeKeyValue(b []byte) (schema.Value, []byte, error) {
	if len(b) == 0 {
		return schema.Null, nil, fmt.Errorf("decode key: truncated")
	}
	kind, b := schema.Kind(b[0]), b[1:]
	switch kind {
	case schema.KindBool, schema.KindInt, schema.KindFloat:
		if len(b) < 8 {
			return schema.Null, nil, fmt.Errorf("decode key: truncated number")
		}
		return schema.Value{Kind: kind, I: int64(binary.BigEndian.Uint64(b))}, b[8:], nil
	case schema.KindString, schema.KindBytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return schema.Null, nil, fmt.Errorf("decode key: truncated text")
		}
		s := string(b[n : n+int(l)])
		if kind == schema.KindBytes {
			return schema.Bytes([]byte(s)), b[n+int(l):], nil
		}
		return schema.String(s), b[n+int(l):], nil
	case schema.KindDecimal:
		if len(b) < 16 {
			return schema.Null, nil, fmt.Errorf("decode key: truncated decimal")
		}
		return schema.Value{Kind: kind, Hi: int64(binary.BigEndian.Uint64(b)), I: int64(binary.BigEndian.Uint64(b[8:]))}, b[16:], nil
	case schema.KindList, schema.KindStruct, schema.KindMap:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)) {
			return schema.Null, nil, fmt.Errorf("decode key: bad element count")
		}
		b = b[n:]
		elems := make([]schema.Value, 0, l)
		for j := uint64(0); j < l; j++ {
			v, rest, err := decodeKeyValue(b)
			if err != nil {
				return schema.Null, nil, err
			}
			elems, b = append(elems, v), rest
		}
		switch kind {
		case schema.KindList:
			return schema.List(elems...), b, nil
		case schema.KindStruct:
			return schema.Struct(elems...), b, nil
		}
		return schema.Map(elems...), b, nil
	}
	return schema.Value{Kind: kind}, b, nil
}
