package fork

import (
	"encoding/binary"

	"github.com/zeebo/blake3"
)

// Hash is the revert proof: the blake3-256 of the given RAM regions, each
// preceded by its length, so that moving bytes between regions changes the
// hash. Compare the hash at a checkpoint with the hash after restoring it.
// It reads every byte: O(RAM).
func Hash(regions ...[]byte) [32]byte {
	h := blake3.New()
	var n [8]byte
	for _, r := range regions {
		binary.LittleEndian.PutUint64(n[:], uint64(len(r)))
		h.Write(n[:]) //nolint:errcheck // blake3's Write never fails
		for off := 0; off < len(r); off += 1 << 20 {
			h.Write(r[off:min(off+1<<20, len(r))]) //nolint:errcheck
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func blake3Sum(b []byte) [32]byte { return blake3.Sum256(b) }
