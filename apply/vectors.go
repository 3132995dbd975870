package apply

import (
	"context"
	"sync"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Bounds of a vectorCache: the vectors it keeps and their bytes in memory
// (roaring's estimate). A merge-on-read table folds its files to about a
// hundred, each with at most one current vector.
const (
	vectorsKept      = 1024
	vectorsKeptBytes = 64 << 20
)

// vectorCache keeps the decoded deletion vectors of a table's files by
// unique id (storage type, path or inline data, offset), which names
// immutable content: a merge-on-read batch reads the vector of each file
// it touches (ReadRowsAt's check that no stored row asked for is hidden)
// and then replaces it (DeleteRows), whose new vector the next batch that
// touches the file reads. Without the cache each vector was decoded from
// storage twice per batch. Bitmaps from get are shared and only read;
// take hands the caller a bitmap of its own to change. Safe for
// concurrent use.
type vectorCache struct {
	mu    sync.Mutex
	byID  map[string]keptVector
	tick  uint64
	bytes uint64
}

type keptVector struct {
	bm   *roaring64.Bitmap
	size uint64
	used uint64 // tick of the last get or put
}

func newVectorCache() *vectorCache {
	return &vectorCache{byID: map[string]keptVector{}}
}

// get returns d's bitmap, decoding it from storage when it is not kept.
// The caller must not change it.
func (c *vectorCache) get(ctx context.Context, st storage.Storage, d *delta.DeletionVector) (*roaring64.Bitmap, error) {
	id := d.UniqueID()
	c.mu.Lock()
	k, ok := c.byID[id]
	if ok {
		c.tick++
		k.used = c.tick
		c.byID[id] = k
	}
	c.mu.Unlock()
	if ok {
		return k.bm, nil
	}
	bm, err := dv.Load(ctx, st, d)
	if err != nil {
		return nil, err
	}
	c.put(d, bm)
	return bm, nil
}

// take returns d's bitmap for the caller to change: a kept one leaves the
// cache (a change must not show through d's id, which may stay the
// table's if the commit fails).
func (c *vectorCache) take(ctx context.Context, st storage.Storage, d *delta.DeletionVector) (*roaring64.Bitmap, error) {
	id := d.UniqueID()
	c.mu.Lock()
	k, ok := c.byID[id]
	if ok {
		c.drop(id)
	}
	c.mu.Unlock()
	if ok {
		return k.bm, nil
	}
	return dv.Load(ctx, st, d)
}

// drop forgets id's vector; c.mu is held.
func (c *vectorCache) drop(id string) {
	c.bytes -= c.byID[id].size
	delete(c.byID, id)
}

// put keeps bm as d's bitmap; the caller no longer changes it. The least
// recently used vectors go while the cache holds more than its bounds
// (a scan of at most vectorsKept entries, a few times per batch).
func (c *vectorCache) put(d *delta.DeletionVector, bm *roaring64.Bitmap) {
	id := d.UniqueID()
	n := bm.GetSizeInBytes()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[id]; ok || n > vectorsKeptBytes {
		return
	}
	c.tick++
	c.byID[id] = keptVector{bm: bm, size: n, used: c.tick}
	c.bytes += n
	for len(c.byID) > vectorsKept || c.bytes > vectorsKeptBytes {
		lru, oldest := "", uint64(0)
		for id, k := range c.byID {
			if lru == "" || k.used < oldest {
				lru, oldest = id, k.used
			}
		}
		c.drop(lru)
	}
}

// len is the number of vectors kept.
func (c *vectorCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}
