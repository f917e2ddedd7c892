package strictjson

import (
	"bytes"
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// smallObject is the number of keys up to which an object's keys are
// compared pairwise; past it they also go into a hash set.
const smallObject = 16

// repeated reports whether key is a key the object f already holds
// (prev, its first spelling), and adds it.
func (r *Reader) repeated(f *frame, key []byte) (prev []byte, dup bool) {
	keys := r.keys[f.keys:]
	if f.set < 0 {
		for _, k := range keys {
			if r.same(k, key) {
				return k, true
			}
		}
		r.keys = append(r.keys, key)
		if len(keys) == smallObject {
			f.set = r.newSet()
			for j, k := range r.keys[f.keys:] {
				r.sets[f.set].add(r.hash(k), int32(j))
			}
		}
		return nil, false
	}
	if j, seen := r.sets[f.set].add(r.hash(key), int32(len(keys))); seen {
		if r.same(keys[j], key) {
			return keys[j], true
		}
		// Two keys hashed alike: compare with all of them.
		for _, k := range keys {
			if r.same(k, key) {
				return k, true
			}
		}
	}
	r.keys = append(r.keys, key)
	return nil, false
}

// same reports whether two keys are one under r's rules.
func (r *Reader) same(a, b []byte) bool {
	if r.lim.FoldKeys {
		return bytes.EqualFold(a, b)
	}
	return bytes.Equal(a, b)
}

// hash hashes a key so that keys that are the same have the same hash.
func (r *Reader) hash(key []byte) uint64 {
	if !r.hasSeed {
		r.seed, r.hasSeed = maphash.MakeSeed(), true
	}
	if r.lim.FoldKeys {
		r.fold = appendFolded(r.fold[:0], key)
		key = r.fold
	}
	return maphash.Bytes(r.seed, key)
}

// newSet lends an empty hash set for an object's keys. Sets are lent and
// returned as the objects they serve open and close, innermost last.
func (r *Reader) newSet() int32 {
	if r.nsets == len(r.sets) {
		r.sets = append(r.sets, keySet{})
	}
	r.sets[r.nsets].reset()
	r.nsets++
	return int32(r.nsets - 1)
}

// dropSet returns the set lent last.
//
//go:noinline
func (r *Reader) dropSet() {
	r.nsets--
	if len(r.sets[r.nsets].slots) > maxPooledSlots {
		r.sets[r.nsets].slots = nil
	}
}

// keySet is a hash set of an object's keys: their hashes, each with the
// index of the first key that has it. It is open addressing over one
// slice, so that a Reader reuses it without allocating.
type keySet struct {
	slots []keySlot // a power of two of them, at most 3/4 used
	n     int
}

type keySlot struct {
	hash uint64
	key  int32 // the key's index + 1; 0 for an empty slot
}

// maxPooledSlots bounds the set a Reader keeps for its next reads (an
// object of some 12,000 keys).
const maxPooledSlots = 1 << 14

func (s *keySet) reset() {
	if len(s.slots) == 0 {
		s.slots = make([]keySlot, 4*smallObject)
	}
	clear(s.slots)
	s.n = 0
}

// add adds hash for key index i, unless the set has it: then it returns
// the index of the first key with that hash.
func (s *keySet) add(hash uint64, i int32) (first int32, seen bool) {
	if 4*(s.n+1) > 3*len(s.slots) {
		old := s.slots
		s.slots, s.n = make([]keySlot, 2*len(old)), 0
		for _, sl := range old {
			if sl.key != 0 {
				s.add(sl.hash, sl.key-1)
			}
		}
	}
	mask := uint64(len(s.slots) - 1)
	for j := hash & mask; ; j = (j + 1) & mask {
		sl := &s.slots[j]
		switch {
		case sl.key == 0:
			sl.hash, sl.key = hash, i+1
			s.n++
			return 0, false
		case sl.hash == hash:
			return sl.key - 1, true
		}
	}
}

// appendFolded appends to dst a canonical form of s such that two keys
// fold alike exactly when bytes.EqualFold holds: every rune becomes the
// smallest rune of its simple case-folding orbit (so "K", "k" and the
// Kelvin sign agree, as do "S", "s" and "ſ").
func appendFolded(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		i += n
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		dst = utf8.AppendRune(dst, m)
	}
	return dst
}
