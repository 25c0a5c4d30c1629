package guest

import "testing"

func TestParseDebugfsTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  string
		want InodeTimes
	}{
		{
			name: "128-byte inode clamped",
			out: "Inode: 12   Type: regular\n ctime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n" +
				" atime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n mtime: 0x7fffffff -- Tue Jan 19 03:14:07 2038\n",
			want: InodeTimes{Atime: 1<<31 - 1, Mtime: 1<<31 - 1, Ctime: 1<<31 - 1},
		},
		{
			name: "256-byte inode with epoch bits and ns",
			out: " ctime: 0x80000000:00000001 -- Tue Jan 19 03:14:08 2038\n" +
				" atime: 0x00000001:00000004 -- x\n mtime: 0x80000000:00000001 -- x\n",
			want: InodeTimes{Atime: 1, AtimeNs: 1, Mtime: 1 << 31, Ctime: 1 << 31},
		},
		{
			name: "pre-1970",
			out:  " ctime: 0xffffffff -- x\n atime: 0xffffffff -- x\n mtime: 0xffffffff -- x\n",
			want: InodeTimes{Atime: -1, Mtime: -1, Ctime: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseDebugfsTimes([]byte(tt.out))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseDebugfsTimes([]byte("debugfs: File not found by ext2_lookup")); err == nil {
		t.Error("no error for output without timestamps")
	}
}
