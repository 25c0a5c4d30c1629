package baseimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/themisfs/themis/guest"
)

// DefaultMaxBytes bounds the base-image cache of Make: the disk the cached
// images take (allocated blocks: base images are sparse), 8 GiB.
const DefaultMaxBytes int64 = 8 << 30

// recentUse is how long an image used (made or found) stays safe from
// eviction whatever the cap: a caller between Make and opening it, or a
// second process making the same image, must not lose it.
const recentUse = 10 * time.Minute

// Maker returns Make with the cache bounded by maxBytes (0: DefaultMaxBytes):
// every image Make uses is marked used (its modification time), and after it
// makes one, the least recently used images beyond the cap are removed,
// never one used within the last 10 minutes (the cache may then stay above
// the cap for a while). A session's overlay holds its base open, so removing
// an image in use by a running session is safe: the next Make builds it
// again.
func Maker(maxBytes int64) func(ctx context.Context, cacheDir string, spec guest.LaneSpec) (string, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return func(ctx context.Context, cacheDir string, spec guest.LaneSpec) (string, error) {
		return makeWithin(ctx, cacheDir, spec, maxBytes)
	}
}

// markUsed sets an image's modification time to now: the cache's LRU
// order.
func markUsed(p string) error {
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		return fmt.Errorf("baseimage: mark %s used: %w", p, err)
	}
	return nil
}

// cached is one image of the cache, for eviction.
type cached struct {
	path  string
	used  time.Time
	bytes int64 // allocated
}

// evict removes the least recently used images of bases until they take at
// most maxBytes, sparing keep and every image used within recentUse. It
// returns what it removed.
func evict(bases, keep string, maxBytes int64) ([]string, error) {
	all, total, err := cachedImages(bases)
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	var removed []string
	for _, c := range all {
		if total <= maxBytes {
			break
		}
		if c.path == keep || time.Since(c.used) < recentUse {
			continue
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("baseimage: evict %s: %w", c.path, err)
		}
		total -= c.bytes
		removed = append(removed, c.path)
	}
	return removed, nil
}

// cachedImages lists the images of bases (not the temporaries a maker
// writes first) with their allocated size, and their total.
func cachedImages(bases string) ([]cached, int64, error) {
	ents, err := os.ReadDir(bases)
	if err != nil {
		return nil, 0, fmt.Errorf("baseimage: list cache: %w", err)
	}
	var all []cached
	var total int64
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".img") {
			continue
		}
		p := filepath.Join(bases, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // evicted by another process meanwhile
		}
		if err != nil {
			return nil, 0, fmt.Errorf("baseimage: list cache: %w", err)
		}
		c := cached{path: p, used: fi.ModTime(), bytes: fi.Size()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			c.bytes = st.Blocks * 512
		}
		all = append(all, c)
		total += c.bytes
	}
	return all, total, nil
}
