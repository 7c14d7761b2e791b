package gateway

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// toolSets shares built tool lists between contexts. Every context has its
// own catalog (its agents may answer differently, and it goes stale on its
// own), but nearly all of them get the very same tools/list answer: built
// once, the list costs one map lookup per context instead of a decode and
// re-encode of every tool, and one copy in memory instead of one per
// context. An answer is recognised by its bytes, compared in full on a hash
// hit, so no agent can pass its list off as another's.
type toolSets struct {
	seed maphash.Seed
	mu   sync.Mutex
	lru  *simplelru.LRU[uint64, *sharedToolSet]
	last atomic.Pointer[toolSet] // the set of the latest answer any context got
}

type sharedToolSet struct {
	pages [][]byte // the answer it was built from
	set   *toolSet
}

// toolSetsSize bounds the distinct answers kept: agents of different kinds
// (or versions) in use at once.
const toolSetsSize = 64

func newToolSets() *toolSets {
	l, err := simplelru.NewLRU[uint64, *sharedToolSet](toolSetsSize, nil)
	if err != nil {
		panic(err) // the size is a positive constant
	}
	return &toolSets{seed: maphash.MakeSeed(), lru: l}
}

// get returns the tool set built from pages, building it with build the
// first time. Concurrent first builds of one answer may both run; the sets
// are equal, and the later one is kept.
func (ts *toolSets) get(pages []json.RawMessage, build func() (*toolSet, error)) (*toolSet, error) {
	var h maphash.Hash
	h.SetSeed(ts.seed)
	for _, p := range pages {
		_, _ = h.Write(p)
		_ = h.WriteByte(0) // pages are JSON: no NUL inside
	}
	key := h.Sum64()
	ts.mu.Lock()
	e, ok := ts.lru.Get(key)
	ts.mu.Unlock()
	if ok && samePages(e.pages, pages) {
		ts.last.Store(e.set)
		return e.set, nil
	}
	set, err := build()
	if err != nil {
		return nil, err
	}
	kept := make([][]byte, len(pages))
	for i, p := range pages {
		kept[i] = p
	}
	ts.mu.Lock()
	ts.lru.Add(key, &sharedToolSet{pages: kept, set: set})
	ts.mu.Unlock()
	ts.last.Store(set)
	return set, nil
}

// lastListed looks name up in the latest tool list any context got.
func (ts *toolSets) lastListed(name string) (agentTool, bool) {
	if set := ts.last.Load(); set != nil {
		return set.lookup(name)
	}
	return agentTool{}, false
}

func samePages(a [][]byte, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
