package tokenizer

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
)

// mergeTable maps an adjacent pair of token ids to the rank of its merge and
// the id of the merged token: open addressing, linear probing, keys packed as
// (left<<32 | right) + 1 so that 0 marks an empty slot.
type mergeTable struct {
	slots []mergeSlot
	shift uint
}

type mergeSlot struct {
	key uint64
	val uint64 // rank<<32 | merged id
}

const noRank = math.MaxInt32

func pairKey(a, b int32) uint64 { return (uint64(uint32(a))<<32 | uint64(uint32(b))) + 1 }

func (m *mergeTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> m.shift }

// get returns the rank and merged id of the pair (a, b), or noRank.
func (m *mergeTable) get(a, b int32) (rank, id int32) {
	if a < 0 || b < 0 || len(m.slots) == 0 {
		return noRank, -1
	}
	key := pairKey(a, b)
	mask := uint64(len(m.slots) - 1)
	for i := m.home(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.key == key {
			return int32(s.val >> 32), int32(uint32(s.val))
		}
		if s.key == 0 {
			return noRank, -1
		}
	}
}

// buildMerges parses "left right" merges (rank = position) against the
// vocabulary. A merge whose parts or result are not tokens can never apply
// and is dropped; a repeated pair keeps its first (best) rank.
func buildMerges(merges []string, ids map[string]int32) (mergeTable, error) {
	var m mergeTable
	if len(merges) >= math.MaxInt32 {
		return m, fmt.Errorf("tokenizer: %d merges is too many", len(merges))
	}
	size := 1 << bits.Len(uint(2*len(merges)+1)) // load factor <= 1/2
	m.slots = make([]mergeSlot, size)
	m.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := uint64(size - 1)
	var buf []byte
	for rank, s := range merges {
		sp := -1
		if len(s) > 1 {
			sp = strings.IndexByte(s[1:], ' ') + 1
		}
		if sp <= 0 || sp == len(s)-1 {
			return m, fmt.Errorf("tokenizer: merge %d %q is not \"left right\"", rank, s)
		}
		a, okA := ids[s[:sp]]
		b, okB := ids[s[sp+1:]]
		buf = append(append(buf[:0], s[:sp]...), s[sp+1:]...)
		c, okC := ids[string(buf)]
		if !okA || !okB || !okC {
			continue
		}
		key := pairKey(a, b)
		for i := m.home(key); ; i = (i + 1) & mask {
			sl := &m.slots[i]
			if sl.key == key {
				break
			}
			if sl.key == 0 {
				*sl = mergeSlot{key: key, val: uint64(rank)<<32 | uint64(uint32(c))}
				break
			}
		}
	}
	return m, nil
}

// smallPiece is the longest piece merged with the flat-array algorithm; longer
// pieces use the heap so that a pathological run stays O(n log n).
const smallPiece = 64

// bpe appends the ids of one pre-tokenized piece: its bytes start as their
// single-byte tokens and the adjacent pair of lowest merge rank (leftmost on a
// tie) is merged until no pair has a merge.
func (t *Tokenizer) bpe(out []int32, p string) []int32 {
	if len(p) > smallPiece {
		return t.bpeHeap(out, p)
	}
	var idBuf [smallPiece]int32
	var rankBuf, mergedBuf [smallPiece]int32
	ids := idBuf[:len(p)]
	for i := range ids {
		ids[i] = t.byteTok[p[i]]
	}
	n := len(ids)
	ranks, merged := rankBuf[:n-1], mergedBuf[:n-1]
	for i := range n - 1 {
		ranks[i], merged[i] = t.merges.get(ids[i], ids[i+1])
	}
	for n > 1 {
		best, br := -1, int32(noRank)
		for i, r := range ranks[:n-1] {
			if r < br {
				best, br = i, r
			}
		}
		if best < 0 {
			break
		}
		ids[best] = merged[best]
		copy(ids[best+1:n], ids[best+2:n])
		copy(ranks[best:n-1], ranks[best+1:n-1])
		copy(merged[best:n-1], merged[best+1:n-1])
		n--
		if best > 0 {
			ranks[best-1], merged[best-1] = t.merges.get(ids[best-1], ids[best])
		}
		if best < n-1 {
			ranks[best], merged[best] = t.merges.get(ids[best], ids[best+1])
		}
	}
	for _, id := range ids[:n] {
		if id >= 0 {
			out = append(out, id)
		}
	}
	return out
}

// bpeHeap is bpe for long pieces: symbols in a linked list over byte
// positions, candidate pairs in a min-heap ordered by (rank, position), stale
// candidates dropped when popped.
func (t *Tokenizer) bpeHeap(out []int32, p string) []int32 {
	n := int32(len(p))
	ids := make([]int32, n)
	size := make([]int32, n) // 0: merged away
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range n {
		ids[i], size[i], next[i], prev[i] = t.byteTok[p[i]], 1, i+1, i-1
	}
	h := pairHeap(make([]pairCand, 0, n))
	push := func(l, r int32) {
		if rank, id := t.merges.get(ids[l], ids[r]); rank != noRank {
			h.push(pairCand{rank: rank, left: l, right: r, rsize: size[r], merged: id})
		}
	}
	for i := range n - 1 {
		push(i, i+1)
	}
	for len(h) > 0 {
		c := h.pop()
		l, r := c.left, c.right
		if size[l] == 0 || next[l] != r || size[r] != c.rsize {
			continue
		}
		ids[l] = c.merged
		size[l] += size[r]
		size[r] = 0
		next[l] = next[r]
		if next[l] < n {
			prev[next[l]] = l
		}
		if prev[l] >= 0 {
			push(prev[l], l)
		}
		if next[l] < n {
			push(l, next[l])
		}
	}
	for i := int32(0); i < n; i = next[i] {
		if ids[i] >= 0 {
			out = append(out, ids[i])
		}
	}
	return out
}

type pairCand struct {
	rank, left, right, rsize, merged int32
}

func (a pairCand) less(b pairCand) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

type pairHeap []pairCand

func (h *pairHeap) push(c pairCand) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].less(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *pairHeap) pop() pairCand {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(s) && s[l].less(s[m]) {
			m = l
		}
		if r := l + 1; r < len(s) && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// pieceCache remembers the ids of recently merged pieces. It is bounded by
// clearing it when full, which keeps the hot set of a text cheap to rebuild.
type pieceCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	maxCacheEntries = 1 << 16
	maxCachedPiece  = 64 // bytes
)

func (c *pieceCache) init() { c.m = make(map[string][]int32) }

func (c *pieceCache) get(p string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[p]
	c.mu.RUnlock()
	return ids, ok
}

func (c *pieceCache) put(p string, ids []int32) {
	c.mu.Lock()
	if len(c.m) >= maxCacheEntries {
		clear(c.m)
	}
	c.m[strings.Clone(p)] = ids
	c.mu.Unlock()
}
