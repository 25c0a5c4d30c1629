package guest

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMakefileModules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mk   string
		want []objModule
	}{
		{"udf", "obj-$(CONFIG_UDF_FS) += udf.o\n\nudf-objs := balloc.o dir.o\n", []objModule{{"udf", "udf", "UDF_FS"}}},
		{
			"fat: three modules and a kunit test",
			"obj-$(CONFIG_FAT_FS) += fat.o\nobj-$(CONFIG_VFAT_FS) += vfat.o\nobj-$(CONFIG_MSDOS_FS) += msdos.o\nobj-$(CONFIG_FAT_KUNIT_TEST) += fat_test.o\n",
			[]objModule{{"fat", "fat", "FAT_FS"}, {"vfat", "vfat", "VFAT_FS"}, {"msdos", "msdos", "MSDOS_FS"}, {"fat_test", "fat_test", "FAT_KUNIT_TEST"}},
		},
		{"btrfs :=", "obj-$(CONFIG_BTRFS_FS) := btrfs.o\n", []objModule{{"btrfs", "btrfs", "BTRFS_FS"}}},
		{"dash in the name", "obj-$(CONFIG_EXT4_KUNIT_TESTS)\t+= ext4-inode-test.o\n", []objModule{{"ext4-inode-test", "ext4_inode_test", "EXT4_KUNIT_TESTS"}}},
		{"continuation and comment", "# obj-$(CONFIG_NO) += no.o\nobj-$(CONFIG_A) += a.o \\\n\tb.o # trailing\n", []objModule{{"a", "a", "A"}, {"b", "b", "A"}}},
		{"obj-m and a subdirectory", "obj-m += mine.o\nobj-$(CONFIG_X) += sub/\n", []objModule{{"mine", "mine", ""}}},
		{"none", "ccflags-y += -I$(src)\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := makefileModules([]byte(tt.mk)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCheckPlans(t *testing.T) {
	t.Parallel()
	idx := &moduleIndex{
		files:   map[string]string{"udf": "/m/udf.ko", "fat": "/m/fat.ko", "vfat": "/m/vfat.ko"},
		builtin: map[string]bool{"ext4": true},
	}
	ext4 := []objModule{{"ext4", "ext4", "EXT4_FS"}}
	jfs := []objModule{{"jfs", "jfs", "JFS_FS"}}
	tests := []struct {
		name      string
		plans     []dirPlan
		flavor    string
		wantBuild []string
		wantErr   []string
	}{
		{name: "udf", plans: []dirPlan{planDir("fs/udf", []objModule{{"udf", "udf", "UDF_FS"}}, idx)}, wantBuild: []string{"udf"}},
		{
			name:      "fat: msdos not configured, two built",
			plans:     []dirPlan{planDir("fs/fat", []objModule{{"fat", "fat", "FAT_FS"}, {"vfat", "vfat", "VFAT_FS"}, {"msdos", "msdos", "MSDOS_FS"}}, idx)},
			wantBuild: []string{"fat", "vfat"},
		},
		{name: "a new obj-m module", plans: []dirPlan{planDir("fs/mine", []objModule{{"mine", "mine", ""}}, idx)}, wantBuild: []string{"mine"}},
		{
			name: "ext4 on the cloud kernel", plans: []dirPlan{planDir("fs/ext4", ext4, idx)}, flavor: FlavorCloud,
			wantErr: []string{"fs/ext4 is ext4, which kernel 6.1.0-57-cloud-amd64 has built in", "use --flavor generic"},
		},
		{name: "built in on generic: no flavour advice", plans: []dirPlan{planDir("fs/ext4", ext4, idx)}, flavor: FlavorGeneric, wantErr: []string{"built in, not as a loadable module"}},
		{name: "not configured", plans: []dirPlan{planDir("fs/jfs", jfs, idx)}, wantErr: []string{"CONFIG_JFS_FS not set", "--flavor generic"}},
		{name: "no module in the Makefile", plans: []dirPlan{planDir("fs/x", nil, idx)}, wantErr: []string{"fs/x: its Makefile names no module"}},
		{
			name:      "one loadable directory is enough",
			plans:     []dirPlan{planDir("fs/ext4", ext4, idx), planDir("fs/udf", []objModule{{"udf", "udf", "UDF_FS"}}, idx)},
			wantBuild: []string{"udf"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPlans(tt.plans, "6.1.0-57-cloud-amd64", tt.flavor)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want %q in it", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var built []string
			for _, p := range tt.plans {
				for _, m := range p.Build {
					built = append(built, m.Name)
				}
			}
			if !reflect.DeepEqual(built, tt.wantBuild) {
				t.Errorf("built %q, want %q", built, tt.wantBuild)
			}
		})
	}
}

func TestFirstBuildError(t *testing.T) {
	t.Parallel()
	const scratch = "/c/modbuild/.build-123"
	tests := []struct {
		name, out, want string
	}{
		{
			"compiler",
			"  CC [M]  /c/modbuild/.build-123/fs/exfat/inode.o\n/c/modbuild/.build-123/fs/exfat/super.c: In function 'exfat_statfs':\n/c/modbuild/.build-123/fs/exfat/super.c:95:27: error: 'nope' undeclared (first use in this function)\n/c/modbuild/.build-123/fs/exfat/super.c:96:1: error: second\nmake[1]: *** [x] Error 1\n",
			"fs/exfat/super.c:95:27: error: 'nope' undeclared (first use in this function)",
		},
		{"fatal", "fs/x/a.c:1:10: fatal error: nope.h: No such file or directory\n", "fs/x/a.c:1:10: fatal error: nope.h: No such file or directory"},
		{"modpost", "  MODPOST Module.symvers\nERROR: modpost: \"nope\" [/c/modbuild/.build-123/fs/x/x.ko] undefined!\nmake: *** Error 2\n", `ERROR: modpost: "nope" [fs/x/x.ko] undefined!`},
		{"other", "a\nb\n\nc\nd\ne\nf\n", "b | c | d | e | f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstBuildError(tt.out, scratch); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestApplyPatchErrors runs GNU patch on a small tree: a hunk that does
// not match, a patch applied twice, a file the tree lacks.
func TestApplyPatchErrors(t *testing.T) {
	t.Parallel()
	good := "--- a/fs/t/a.c\n+++ b/fs/t/a.c\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
	tests := []struct {
		name    string
		patches []string
		want    string // "" for success
	}{
		{"applies", []string{good}, ""},
		{"hunk does not match", []string{"--- a/fs/t/a.c\n+++ b/fs/t/a.c\n@@ -1,3 +1,3 @@\n one\n-zwei\n+TWO\n three\n"}, "patch p.patch does not apply: fs/t/a.c: hunk #1 FAILED at line 1"},
		{"applied twice", []string{good, good}, "fs/t/a.c: already applied (or reversed)"},
		{"missing file", []string{"--- a/fs/t/nope.c\n+++ b/fs/t/nope.c\n@@ -1 +1 @@\n-a\n+b\n"}, "not in this kernel's source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "fs", "t"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "fs", "t", "a.c"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			for _, p := range tt.patches {
				if err = applyPatch(context.Background(), dir, []byte(p), "p.patch"); err != nil {
					break
				}
			}
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if b := mustRead(t, filepath.Join(dir, "fs", "t", "a.c")); string(b) != "one\nTWO\nthree\n" {
					t.Errorf("patched file %q", b)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(dir, "fs", "t", "*.*.*")); len(leftovers) > 0 {
				t.Errorf("patch left %q", leftovers)
			}
		})
	}
}

func TestToolchainErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"source older than the kernel", checkVersions("6.1.170", "linux-headers-6.1.0-57-cloud-amd64", "6.1.192-3", "6.1.192-3"),
			"the kernel source is 6.1.170 but the kernel package is 6.1.192-3: install the matching source (apt-get install linux-source-6.1=6.1.192-3)"},
		{"headers of another revision", checkVersions("6.1.192", "linux-headers-6.1.0-57-cloud-amd64", "6.1.192-2", "6.1.192-3"),
			"linux-headers-6.1.0-57-cloud-amd64 is 6.1.192-2 but the kernel package is 6.1.192-3: install the matching headers (apt-get install linux-headers-6.1.0-57-cloud-amd64=6.1.192-3)"},
		{"headers not from a package", checkVersions("6.1.192", "linux-headers-x", "", "6.1.192-3"), ""},
		{"no headers", func() error {
			_, err := headersDir(Options{}, "6.1.0-999-cloud-amd64")
			return err
		}(), "install the Debian package linux-headers-6.1.0-999-cloud-amd64"},
		{"no source", func() error {
			_, err := sourceTarball(Options{}, "6.999.1-1")
			return err
		}(), "install the Debian package linux-source-6.999 (apt-get install linux-source-6.999=6.999.1-1"},
		{"no kernel tree Makefile", func() error {
			_, err := headersDir(Options{KernelTree: t.TempDir()}, "x")
			return err
		}(), "not a kernel headers or build tree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				if tt.err != nil {
					t.Fatal(tt.err)
				}
				return
			}
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", tt.err, tt.want)
			}
		})
	}
}

func TestVersionHelpers(t *testing.T) {
	t.Parallel()
	if got := upstreamOf("6.1.192-3"); got != "6.1.192" {
		t.Errorf("upstreamOf = %q", got)
	}
	if got := seriesOf("6.12.41"); got != "6.12" {
		t.Errorf("seriesOf = %q", got)
	}
	mk := filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(mk, []byte("# SPDX\nVERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 192\nEXTRAVERSION =\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := makefileVersion(mk); err != nil || v != "6.1.192" {
		t.Errorf("makefileVersion = %q, %v", v, err)
	}
	if err := os.WriteFile(mk, []byte("VERSION = 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := makefileVersion(mk); err == nil {
		t.Error("makefileVersion accepted a Makefile without PATCHLEVEL")
	}
}
