package session

import "testing"

func TestParseMemTotal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // 0: an error
	}{
		{"MemTotal:       24576000 kB\nMemFree: 1 kB\n", 24576000 << 10},
		{"MemFree: 1 kB\nMemTotal: 1024 kB\n", 1 << 20},
		{"MemFree: 1 kB\n", 0},
		{"MemTotal: -5 kB\n", 0},
		{"MemTotal: 12 MB\n", 0},
		{"MemTotal: 99999999999999999999 kB\n", 0},
		{"", 0},
	} {
		got, err := parseMemTotal([]byte(tc.in))
		if (err != nil) != (tc.want == 0) || got != tc.want {
			t.Errorf("parseMemTotal(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
