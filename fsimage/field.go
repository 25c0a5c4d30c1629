package fsimage

import (
	"fmt"
	"sort"
	"strings"
)

// Field is where one on-disk field lies in an image: the offset of its
// least significant byte (the first of a little-endian field, the last of
// a big-endian one), its width, and the structure holding it. The
// filesystem parsers (fsimage/btrfs, fsimage/xfs) locate their corruption
// targets as Fields.
type Field struct {
	Phys  int64
	Size  int
	Where string // e.g. "superblock", "inode item 258", "AGF 0"
}

// PickField returns the field called name of a structure's table m, or an
// error naming what and listing the names m has.
func PickField[V any](m map[string]V, what, name string) (V, error) {
	f, ok := m[name]
	if !ok {
		var zero V
		return zero, fmt.Errorf("%s field %q: want one of %s", what, name, FieldNames(m))
	}
	return f, nil
}

// FieldNames lists a table's names, sorted, for messages.
func FieldNames[V any](m map[string]V) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
