package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/repro"
)

// TestExportDirFindingID: the id a ledger row carries becomes a path and
// a word in scripts only when it is a finding id.
func TestExportDirFindingID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id, out, want string // want "" refused
	}{
		{"f-0123456789ab", "", "f-0123456789ab"},
		{"f-0123456789ab", "x/y", "x/y"},
		{"f-../../x", "", ""},
		{"f-../../x", "out", ""},
		{"f-1; rm -rf ~", "", ""},
		{"f-1\nrm", "", ""},
		{"f-$(id)", "", ""},
		{"f-ABC", "", ""},
		{"f-", "", ""},
		{"../f-1", "", ""},
		{"/tmp/f-1", "", ""},
		{"", "", ""},
		{"f-" + strings.Repeat("a", 65), "", ""},
	}
	for _, tt := range tests {
		got, err := exportDir(tt.id, tt.out)
		if tt.want == "" {
			if err == nil || !strings.Contains(err.Error(), "not a finding id") {
				t.Errorf("exportDir(%q, %q) = %q, %v; want it refused", tt.id, tt.out, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("exportDir(%q, %q) = %q, %v; want %q", tt.id, tt.out, got, err, tt.want)
		}
	}
}

// TestOpenExportDir: an export writes into a directory it makes or an
// empty one; a symlink, a file or a directory holding anything (a symlink
// named as a file the export writes, above all) is refused, and the file a
// planted symlink points at is untouched.
func TestOpenExportDir(t *testing.T) {
	t.Parallel()
	files := repro.Files{"repro.sh": []byte("#!/bin/sh\n"), "README": []byte("readme\n")}
	tests := []struct {
		name    string
		prepare func(t *testing.T, base, victim string) string // returns --out
		wantErr string                                         // "" succeeds
	}{
		{"new, parent too", func(t *testing.T, base, _ string) string { return filepath.Join(base, "a", "b") }, ""},
		{"empty directory", func(t *testing.T, base, _ string) string { return mkdir(t, filepath.Join(base, "e")) }, ""},
		{"symlink to an empty directory", func(t *testing.T, base, _ string) string {
			return symlink(t, mkdir(t, filepath.Join(base, "target")), filepath.Join(base, "link"))
		}, "a symlink"},
		{"symlink to a file", func(t *testing.T, base, victim string) string {
			return symlink(t, victim, filepath.Join(base, "link"))
		}, "a symlink"},
		{"dangling symlink", func(t *testing.T, base, _ string) string {
			return symlink(t, filepath.Join(base, "nowhere"), filepath.Join(base, "link"))
		}, "a symlink"},
		{"holds repro.sh -> victim", func(t *testing.T, base, victim string) string {
			dir := mkdir(t, filepath.Join(base, "d"))
			symlink(t, victim, filepath.Join(dir, "repro.sh"))
			return dir
		}, "not empty"},
		{"holds a file", func(t *testing.T, base, _ string) string {
			dir := mkdir(t, filepath.Join(base, "d"))
			if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "not empty"},
		{"a file", func(t *testing.T, base, _ string) string {
			p := filepath.Join(base, "f")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, victim := t.TempDir(), writeVictim(t)
			out := tt.prepare(t, base, victim)
			root, err := openExportDir(out)
			if err == nil {
				err = writeFiles(root, files)
			}
			checkVictim(t, victim)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("export to %s: %v, want an error with %q", out, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range files {
				got, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || string(got) != string(want) {
					t.Errorf("%s: %q, %v; want %q", name, got, err, want)
				}
			}
			if fi, err := os.Stat(filepath.Join(out, "repro.sh")); err != nil || fi.Mode()&0o100 == 0 {
				t.Errorf("repro.sh: %v, %v; want it executable", fi.Mode(), err)
			}
		})
	}
}

// TestExportPlantedSymlink: a symlink planted in the directory after it was
// checked (a race) is not followed: the write fails and the victim stays,
// for the files and for the streamed crash.img.
func TestExportPlantedSymlink(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"repro.sh", "crash.img"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, victim := filepath.Join(t.TempDir(), "out"), writeVictim(t)
			root, err := openExportDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			w := newExportWriter(root)
			defer w.close()
			symlink(t, victim, filepath.Join(dir, name))
			if name == "crash.img" {
				err = w.image(&themisv1.CrashImageChunk{Offset: 0, Data: []byte("pwned"), Size: 5})
			} else {
				err = w.file(&themisv1.ExportFile{Name: name, Data: []byte("pwned"), Size: 5})
			}
			if err == nil {
				t.Errorf("write of %s through a planted symlink: no error", name)
			}
			checkVictim(t, victim)
		})
	}
}

// writeFiles writes files under root as an Export stream of one chunk
// each would, repro.sh executable, and closes root.
func writeFiles(root *os.Root, files repro.Files) error {
	w := newExportWriter(root)
	var names []string
	for name, b := range files {
		if err := w.file(&themisv1.ExportFile{Name: name, Executable: name == "repro.sh", Data: b, Size: int64(len(b))}); err != nil {
			w.close()
			return err
		}
		names = append(names, name)
	}
	return w.finish(names)
}

// TestExportWriterRefuses: what the daemon sends is not trusted: a name
// with a directory, a dot first or crash.img's, a first chunk not at 0, a
// chunk out of order or past the file's size, a file past maxExportFile,
// a file short at the end or missing from the summary are refused, and
// nothing is written outside the directory.
func TestExportWriterRefuses(t *testing.T) {
	t.Parallel()
	chunk := func(name string, off int64, data string, size int64) *themisv1.ExportFile {
		return &themisv1.ExportFile{Name: name, Offset: off, Data: []byte(data), Size: size}
	}
	tests := []struct {
		name   string
		chunks []*themisv1.ExportFile
		names  []string // the summary's
		want   string
	}{
		{"directory", []*themisv1.ExportFile{chunk("../x", 0, "a", 1)}, nil, "not a plain file name"},
		{"slash", []*themisv1.ExportFile{chunk("a/b", 0, "a", 1)}, nil, "not a plain file name"},
		{"dot first", []*themisv1.ExportFile{chunk(".bashrc", 0, "a", 1)}, nil, "not a plain file name"},
		{"the image's name", []*themisv1.ExportFile{chunk("crash.img", 0, "a", 1)}, nil, "not a plain file name"},
		{"first chunk not at 0", []*themisv1.ExportFile{chunk("README", 4, "a", 8)}, nil, "first chunk at 4"},
		{"too large", []*themisv1.ExportFile{chunk("README", 0, "a", maxExportFile+1)}, nil, "at most"},
		{"past its size", []*themisv1.ExportFile{chunk("README", 0, "abc", 2)}, nil, "within the file's 2"},
		{"out of order", []*themisv1.ExportFile{chunk("README", 0, "ab", 4), chunk("README", 3, "c", 4)}, nil, "want one at 2"},
		{"size changes", []*themisv1.ExportFile{chunk("README", 0, "ab", 4), chunk("README", 2, "cd", 5)}, nil, "want one at 2 within the file's 4"},
		{"short", []*themisv1.ExportFile{chunk("README", 0, "ab", 4)}, []string{"README"}, "2 of its 4 bytes"},
		{"not in the summary", []*themisv1.ExportFile{chunk("README", 0, "ab", 2)}, []string{"repro.sh"}, "not in the daemon's summary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			root, err := openExportDir(filepath.Join(base, "out"))
			if err != nil {
				t.Fatal(err)
			}
			w := newExportWriter(root)
			for _, ch := range tt.chunks {
				if err = w.file(ch); err != nil {
					break
				}
			}
			if err == nil {
				err = w.finish(tt.names)
			}
			w.close()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
			if ents, err := os.ReadDir(base); err != nil || len(ents) != 1 {
				t.Errorf("beside the export: %v %v", ents, err)
			}
		})
	}
}

func writeVictim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkVictim(t *testing.T, p string) {
	t.Helper()
	if b, err := os.ReadFile(p); err != nil || string(b) != "victim" {
		t.Errorf("victim %s: %q, %v; want it untouched", p, b, err)
	}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, p string) string {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	return p
}
