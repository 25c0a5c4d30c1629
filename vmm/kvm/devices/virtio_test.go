package devices

import "testing"

// TestLayoutOf: the split ring layout against Linux's vring_size for the
// legacy 4 KiB alignment, and the block queue's constants.
func TestLayoutOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size                uint16
		usedOff, usedBytes  uint64
		descBytes, availLen uint64
	}{
		{1, 4096, 14, 16, 8},
		{128, 4096, 1030, 2048, 262},
		{256, 8192, 2054, 4096, 518},
	} {
		got := layoutOf(tt.size)
		want := vringLayout{descBytes: tt.descBytes, availBytes: tt.availLen, usedOff: tt.usedOff, usedBytes: tt.usedBytes}
		if got != want {
			t.Errorf("layoutOf(%d) = %+v, want %+v", tt.size, got, want)
		}
	}
	if got := layoutOf(BlockQueueSize); got != (vringLayout{descTableSize, availRingSize, usedRingOffset, usedRingSize}) {
		t.Errorf("layoutOf(BlockQueueSize) = %+v, differs from the block constants", got)
	}
}
