package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// toolSets shares built tool lists between contexts. Every context has its
// own catalog (its agents may answer differently, and it goes stale on its
// own), but nearly all of them get the very same tools/list answer: built
// once, the list costs one map lookup per context instead of a decode and
// re-encode of every tool, and one copy in memory instead of one per
// context. One agent's answer is recognised by a SHA-256 of its agent's
// name and its pages (answerKey), so no agent can pass its list off as
// another's, and its bytes need not be kept to compare; a union by the
// IDs of its lists, compared in full on a hash hit.
type toolSets struct {
	seed  maphash.Seed
	mu    sync.Mutex
	lru   *simplelru.LRU[uint64, *sharedToolSet]
	lists *simplelru.LRU[[sha256.Size]byte, *agentList] // one agent's answers (agentList)
	last  atomic.Pointer[toolSet]                       // the set of the latest answer a context of an unnarrowed token got
	ids   atomic.Uint64                                 // the last agentList.id given
}

type sharedToolSet struct {
	pages [][]byte // the answer it was built from
	set   *toolSet
}

// toolSetsSize bounds the distinct answers kept: agents of different kinds
// (or versions) in use at once.
const toolSetsSize = 64

// agentListsSize bounds the distinct answers of single agents kept for
// sharing.
const agentListsSize = 4 * toolSetsSize

func newToolSets() *toolSets {
	l, err := simplelru.NewLRU[uint64, *sharedToolSet](toolSetsSize, nil)
	if err != nil {
		panic(err) // the size is a positive constant
	}
	lists, err := simplelru.NewLRU[[sha256.Size]byte, *agentList](agentListsSize, nil)
	if err != nil {
		panic(err) // the size is a positive constant
	}
	return &toolSets{seed: maphash.MakeSeed(), lru: l, lists: lists}
}

// agentList returns what is kept of one agent's answer, decoded with
// decode the first time that agent gave those very bytes. fresh says it
// was decoded now (what it left out is then logged). An answer cut short
// (a.cut) or over maxBytes is decoded each time and not shared.
func (ts *toolSets) agentList(a agentPages, maxBytes int, decode func() (*agentList, error)) (l *agentList, fresh bool, err error) {
	size := 0
	for _, p := range a.pages {
		size += len(p)
	}
	share := !a.cut && size <= maxBytes
	var key [sha256.Size]byte
	if share {
		key = answerKey(a)
		ts.mu.Lock()
		l, ok := ts.lists.Get(key)
		ts.mu.Unlock()
		if ok {
			return l, false, nil
		}
	}
	l, err = decode()
	if err != nil {
		return nil, false, err
	}
	l.id = ts.ids.Add(1)
	if share {
		ts.mu.Lock()
		ts.lists.Add(key, l)
		ts.mu.Unlock()
	}
	return l, true, nil
}

// answerKey is the SHA-256 of an agent's name and its answer's pages,
// each prefixed with its length: two answers share a key only if the same
// agent gave the very same pages, which an agent cannot forge (a keyed
// 64-bit hash would need the bytes kept to compare on a hit).
func answerKey(a agentPages) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	write([]byte(a.agent))
	for _, p := range a.pages {
		write(p)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// union returns the union of lists (buildUnion), built with build the
// first time these very lists meet in this order (the order names the
// agent that keeps a shared name): contexts whose agents all gave the
// same answers share one. everyAgent says the lists are of every online
// agent (a token not narrowed to some): only such a union is the one
// lastListed looks in.
func (ts *toolSets) union(lists []*agentList, everyAgent bool, build func() (*toolSet, error)) (*toolSet, error) {
	key := make([]json.RawMessage, len(lists))
	for i, l := range lists {
		key[i] = strconv.AppendUint(nil, l.id, 10)
	}
	return ts.get(key, everyAgent, build)
}

// get returns the tool set built from pages, building it with build the
// first time. Concurrent first builds of one answer may both run; the sets
// are equal, and the later one is kept.
func (ts *toolSets) get(pages []json.RawMessage, last bool, build func() (*toolSet, error)) (*toolSet, error) {
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
		if last {
			ts.last.Store(e.set)
		}
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
	if last {
		ts.last.Store(set)
	}
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
