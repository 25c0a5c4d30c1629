package fsimage

import (
	"strings"
	"testing"
)

func TestPickField(t *testing.T) {
	t.Parallel()
	m := map[string]int{"size": 16, "mode": 52}
	for _, tt := range []struct {
		name string
		want int
		err  string
	}{{"size", 16, ""}, {"mode", 52, ""}, {"i_size", 0, `inode field "i_size": want one of mode, size`}} {
		got, err := PickField(m, "inode", tt.name)
		if tt.err == "" && (err != nil || got != tt.want) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("PickField(%q) = %d, %v; want %d, %q", tt.name, got, err, tt.want, tt.err)
		}
	}
}
