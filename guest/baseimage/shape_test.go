package baseimage

import (
	"strings"
	"testing"

	"github.com/themisfs/themis/guest"
)

// TestShapeArgsInMkfsArgs checks that every shaping option is one mkfsArgs
// passes (xfs's -m: its crc and bigtime settings are in mkfsArgs's -m).
func TestShapeArgsInMkfsArgs(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"ext2", "ext2:inode_size=128", "ext4:block_size=4096", "ext3", "btrfs", "btrfs:mixed=0:size=128", "vfat", "vfat:fat=32", "xfs", "udf", "minix", "exfat", "f2fs", "nilfs2"} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			spec, err := guest.ParseLaneSpec(s)
			if err != nil {
				t.Fatal(err)
			}
			shape, err := ShapeArgs(spec)
			if err != nil {
				t.Fatal(err)
			}
			args, _, err := mkfsArgs(spec)
			if err != nil {
				t.Fatal(err)
			}
			all := " " + strings.Join(args, " ") + " "
			for i := 0; i < len(shape); i++ {
				w := shape[i]
				if w == "-m" && spec.FS == "xfs" {
					i++
					for _, kv := range strings.Split(shape[i], ",") {
						if !strings.Contains(all, kv) {
							t.Errorf("ShapeArgs(%s) has -m %s; mkfsArgs %q has no %s", s, shape[i], args, kv)
						}
					}
					continue
				}
				if !strings.Contains(all, " "+w+" ") {
					t.Errorf("ShapeArgs(%s) = %q: %q is not in mkfsArgs %q", s, shape, w, args)
				}
			}
		})
	}
	if _, err := ShapeArgs(guest.LaneSpec{FS: "nope"}); err == nil {
		t.Error("ShapeArgs of an unknown filesystem: no error")
	}
}
