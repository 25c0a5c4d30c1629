package guest

import (
	"reflect"
	"strings"
	"testing"
)

// udfPatch is a git-format patch of one fs/udf file, with a removed line
// that starts "-- " and an added one "++ " inside the hunk: body lines,
// not file headers.
const udfPatch = `From 0000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] udf: test

---
 fs/udf/namei.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/fs/udf/namei.c b/fs/udf/namei.c
index 1111111..2222222 100644
--- a/fs/udf/namei.c
+++ b/fs/udf/namei.c
@@ -10,4 +10,4 @@ static int udf_link(void)
 	int a;
--- /etc/passwd
+++ /etc/shadow
 	return 0;
 }
`

func TestParsePatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		patch     string
		wantFiles []string
		wantDirs  []string
		wantErr   string
	}{
		{name: "git", patch: udfPatch, wantFiles: []string{"fs/udf/namei.c"}, wantDirs: []string{"fs/udf"}},
		{
			name:      "diff -u with timestamps, two directories, a subdirectory",
			patch:     "--- a/fs/exfat/super.c\t2026-01-01 00:00:00\n+++ b/fs/exfat/super.c\t2026-01-01 00:00:01\n@@ -1 +1 @@\n-a\n+b\n--- x/fs/xfs/libxfs/xfs_da.c\n+++ y/fs/xfs/libxfs/xfs_da.c\n@@ -1,2 +1,2 @@\n \n-a\n+b\n",
			wantFiles: []string{"fs/exfat/super.c", "fs/xfs/libxfs/xfs_da.c"},
			wantDirs:  []string{"fs/exfat", "fs/xfs"},
		},
		{
			name:      "new file from /dev/null, CRLF line ends",
			patch:     "--- /dev/null\r\n+++ b/fs/fat/new.c\r\n@@ -0,0 +1,2 @@\r\n+a\r\n+b\r\n",
			wantFiles: []string{"fs/fat/new.c"}, wantDirs: []string{"fs/fat"},
		},
		{
			name:      "no newline marker",
			patch:     "--- a/fs/fat/dir.c\n+++ b/fs/fat/dir.c\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n",
			wantFiles: []string{"fs/fat/dir.c"}, wantDirs: []string{"fs/fat"},
		},
		{name: "absolute", patch: "--- /etc/passwd\n+++ /etc/passwd\n", wantErr: "absolute"},
		{name: "dot dot", patch: "--- a/fs/udf/../../etc/x\n+++ b/fs/udf/x\n", wantErr: ".. component"},
		{name: "outside fs", patch: "--- a/include/linux/fs.h\n+++ b/include/linux/fs.h\n", wantErr: "include/linux/fs.h is not under fs/<dir>/"},
		{name: "a file of fs/ itself", patch: "--- a/fs/namei.c\n+++ b/fs/namei.c\n", wantErr: "fs/namei.c is not under fs/<dir>/"},
		{name: "no strip component", patch: "--- namei.c\n+++ namei.c\n", wantErr: "no leading directory"},
		{name: "quoted git name", patch: "diff --git \"a/fs/udf/x y.c\" \"b/fs/udf/x y.c\"\n", wantErr: "not allowed"},
		{name: "rename out of fs", patch: "diff --git a/fs/udf/a.c b/fs/udf/a.c\nrename from fs/udf/a.c\nrename to kernel/a.c\n", wantErr: "kernel/a.c is not under fs/<dir>/"},
		{name: "Index line", patch: "Index: mm/x.c\n--- a/fs/udf/a.c\n+++ b/fs/udf/a.c\n", wantErr: "mm/x.c is not under"},
		{name: "no headers", patch: "hello\n", wantErr: "no file headers"},
		{name: "hunk body runs over", patch: "--- a/fs/udf/a.c\n+++ b/fs/udf/a.c\n@@ -1,2 +1 @@\n a\n b\n", wantErr: "longer than its header"},
		{name: "bad hunk body", patch: "--- a/fs/udf/a.c\n+++ b/fs/udf/a.c\n@@ -1,2 +1,2 @@\n a\n*b\n", wantErr: "starts with none of"},
		{name: "bad hunk header", patch: "--- a/fs/udf/a.c\n+++ b/fs/udf/a.c\n@@ -1,x +1 @@\n", wantErr: "malformed hunk header"},
		{name: "too large", patch: strings.Repeat("x", maxPatchBytes+1), wantErr: "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pf, err := parsePatch([]byte(tt.patch))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pf.Files, tt.wantFiles) || !reflect.DeepEqual(pf.Dirs, tt.wantDirs) {
				t.Errorf("files %q dirs %q, want %q %q", pf.Files, pf.Dirs, tt.wantFiles, tt.wantDirs)
			}
		})
	}
}

// FuzzParsePatch checks that the parser never panics and that whatever it
// accepts names only files under fs/<dir>/, with no way out of it.
func FuzzParsePatch(f *testing.F) {
	f.Add([]byte(udfPatch))
	f.Add([]byte("--- a/fs/x/y.c\n+++ b/fs/x/y.c\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n"))
	f.Add([]byte("diff --git a/fs/a/b b/fs/a/b\nrename from fs/a/b\nrename to fs/a/c\n"))
	f.Add([]byte("--- /dev/null\n+++ b/fs/q/r.h\n@@ -0,0 +1 @@\n+x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pf, err := parsePatch(b)
		if err != nil {
			return
		}
		if len(pf.Files) == 0 || len(pf.Dirs) == 0 {
			t.Fatalf("accepted with no files: %+v", pf)
		}
		for _, p := range pf.Files {
			parts := strings.Split(p, "/")
			if len(parts) < 3 || parts[0] != "fs" {
				t.Fatalf("accepted %q", p)
			}
			for _, c := range parts {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("accepted %q", p)
				}
			}
		}
		for _, d := range pf.Dirs {
			if parts := strings.Split(d, "/"); len(parts) != 2 || parts[0] != "fs" || parts[1] == ".." || parts[1] == "." {
				t.Fatalf("accepted directory %q", d)
			}
		}
	})
}
