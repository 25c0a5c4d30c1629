package fork

// Set is a set of page numbers in [0, pages): O(1) Add, iteration and Reset
// in O(members). The zero Set is not usable; use NewSet.
type Set struct {
	bits []uint64
	list []uint32
}

// NewSet returns an empty set for page numbers below pages.
func NewSet(pages int) *Set {
	return &Set{bits: make([]uint64, (pages+63)/64)}
}

// Cap is the number of pages the set can hold (rounded up to 64).
func (s *Set) Cap() int { return len(s.bits) * 64 }

// Add inserts page p. It panics if p is out of range, as a slice index would.
func (s *Set) Add(p int) {
	w, b := p/64, uint64(1)<<(p%64)
	if s.bits[w]&b != 0 {
		return
	}
	s.bits[w] |= b
	s.list = append(s.list, uint32(p))
}

// Has reports whether p is in the set.
func (s *Set) Has(p int) bool { return s.bits[p/64]&(1<<(p%64)) != 0 }

// AddBitmap ORs a dirty bitmap (bit i of word w is page base+64w+i, the KVM
// layout) into the set. Bits beyond the set's capacity are an error of the
// caller and panic.
func (s *Set) AddBitmap(base int, bm []uint64) {
	for w, word := range bm {
		for word != 0 {
			i := trailingZeros(word)
			word &= word - 1
			s.Add(base + w*64 + i)
		}
	}
}

// Pages returns the members in insertion order. The slice is owned by the
// set and valid until the next Add or Reset.
func (s *Set) Pages() []uint32 { return s.list }

// Len is the number of members.
func (s *Set) Len() int { return len(s.list) }

// Reset empties the set in O(members).
func (s *Set) Reset() {
	for _, p := range s.list {
		s.bits[p/64] = 0
	}
	s.list = s.list[:0]
}
