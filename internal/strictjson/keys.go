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

// maxPooledSet bounds the hash set a Reader keeps for its next reads.
const maxPooledSet = 1024

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
			set := r.sets[f.set]
			for j, k := range r.keys[f.keys:] {
				if h := r.hash(k); !hasKey(set, h) {
					set[h] = int32(j)
				}
			}
		}
		return nil, false
	}
	set := r.sets[f.set]
	h := r.hash(key)
	if j, seen := set[h]; seen {
		if r.same(keys[j], key) {
			return keys[j], true
		}
		// Two keys hashed alike: compare with all of them.
		for _, k := range keys {
			if r.same(k, key) {
				return k, true
			}
		}
	} else {
		set[h] = int32(len(keys))
	}
	r.keys = append(r.keys, key)
	return nil, false
}

func hasKey(set map[uint64]int32, h uint64) bool {
	_, ok := set[h]
	return ok
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

// newSet lends an empty hash set for an object's keys.
func (r *Reader) newSet() int32 {
	if r.nsets == len(r.sets) {
		r.sets = append(r.sets, make(map[uint64]int32))
	}
	r.nsets++
	return int32(r.nsets - 1)
}

// dropSet returns the innermost set lent: sets are lent and returned
// like the objects they serve, innermost last.
func (r *Reader) dropSet(i int32) {
	if len(r.sets[i]) > maxPooledSet {
		r.sets[i] = make(map[uint64]int32)
	} else {
		clear(r.sets[i])
	}
	r.nsets--
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
