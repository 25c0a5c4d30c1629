package scratch

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Free is the space, in bytes, left to an unprivileged writer on dir's
// file system (statfs: f_bavail × f_bsize). On the tmpfs of the scratch
// dir it is how much more guest RAM the files there can hold.
func Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("scratch: statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}
