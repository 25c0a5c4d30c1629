package agent

import "testing"

func TestReadyPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line, want string
		ok         bool
	}{
		{"themis-agent: ready on /dev/vport1p1", "/dev/vport1p1", true},
		{"[    4.2] themis-agent: ready on /dev/ttyS1\r", "/dev/ttyS1", true},
		{"themis-agent: ready on ", "", false},
		{"themis-agent: ready", "", false},
		{"themis-agent: serving on /dev/ttyS1", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := ReadyPath(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ReadyPath(%q) = %q, %v; want %q, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}
