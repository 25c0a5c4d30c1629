package guest

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
)

var testTmp string // removed by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "guest-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testTmp = dir
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

var (
	stubOnce sync.Once
	stubPath string
	stubErr  error
)

// stubAgent builds testdata/initstub, a tiny static /init that loads the
// modules and powers off, once per test binary.
func stubAgent(t *testing.T) string {
	t.Helper()
	stubOnce.Do(func() {
		out := filepath.Join(testTmp, "initstub")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
		cmd.Dir = filepath.Join("testdata", "initstub")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if b, err := cmd.CombinedOutput(); err != nil {
			stubErr = fmt.Errorf("build initstub: %w: %s", err, b)
			return
		}
		stubPath = out
	})
	if stubErr != nil {
		t.Fatal(stubErr)
	}
	return stubPath
}

var (
	debOnce sync.Once
	debPath string
	debErr  error
)

// realDeb returns the real Debian cloud kernel package, downloaded once into
// the shared cache (DefaultCacheDir) so later runs reuse it. It skips in
// -short mode, and skips when the download fails unless CI is set.
func realDeb(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: needs the real kernel package (~27 MB download); run without -short")
	}
	debOnce.Do(func() {
		cache, err := DefaultCacheDir()
		if err != nil {
			debErr = err
			return
		}
		debPath, debErr = downloadKernel(context.Background(), zaptest.NewLogger(t), "", "", cache)
	})
	if debErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("real kernel package: %v", debErr)
		}
		t.Skipf("skipping: cannot get the real kernel package (set CI=true to make this fail): %v", debErr)
	}
	return debPath
}

var (
	treeOnce sync.Once
	treeVal  *kernelTree
	treeErr  error
)

// realTree returns the unpacked real kernel package.
func realTree(t *testing.T) *kernelTree {
	t.Helper()
	deb := realDeb(t)
	treeOnce.Do(func() {
		cache, err := DefaultCacheDir()
		if err != nil {
			treeErr = err
			return
		}
		treeVal, treeErr = unpackKernel(context.Background(), zaptest.NewLogger(t), deb, cache)
	})
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return treeVal
}

// fakeModule returns a minimal ELF64 relocatable object whose .modinfo
// section holds the given key=value fields, like a kernel module's.
func fakeModule(t testing.TB, fields ...string) []byte {
	t.Helper()
	var modinfo []byte
	for _, f := range fields {
		modinfo = append(modinfo, f...)
		modinfo = append(modinfo, 0)
	}
	shstrtab := []byte("\x00.modinfo\x00.shstrtab\x00")
	const ehsize, shentsize = 64, 64
	modOff := uint64(ehsize)
	strOff := modOff + uint64(len(modinfo))
	shOff := (strOff + uint64(len(shstrtab)) + 7) &^ 7

	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: ehsize, Shentsize: shentsize, Shnum: 3, Shstrndx: 2,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC), Off: modOff, Size: uint64(len(modinfo)), Addralign: 1},
		{Name: 10, Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(shstrtab)), Addralign: 1},
	}
	for _, v := range []any{hdr, modinfo, shstrtab, make([]byte, shOff-strOff-uint64(len(shstrtab))), sections} {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// writeFakeTree writes modules (file name -> depends= value) under dir.
func writeFakeTree(t *testing.T, dir string, mods map[string]string) {
	t.Helper()
	for file, deps := range mods {
		p := filepath.Join(dir, "kernel", file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(file)
		for _, suf := range moduleSuffixes {
			name = strings.TrimSuffix(name, suf)
		}
		data := fakeModule(t, "license=GPL", "depends="+deps, "name="+normModName(name), "vermagic=6.1.0 SMP")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cpioRecord is one parsed newc record.
type cpioRecord struct {
	Name                               string
	Ino, Mode, UID, GID, Nlink, Mtime  uint32
	DevMajor, DevMinor, RMajor, RMinor uint32
	Data                               []byte
}

// parseNewc is an independent newc reader for the tests; it returns the
// records before the trailer.
func parseNewc(t *testing.T, b []byte) []cpioRecord {
	t.Helper()
	var recs []cpioRecord
	off := 0
	for {
		if off+110 > len(b) {
			t.Fatalf("cpio: truncated header at %d", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("cpio: bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("cpio: field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		r := cpioRecord{Ino: field(0), Mode: field(1), UID: field(2), GID: field(3), Nlink: field(4), Mtime: field(5),
			DevMajor: field(7), DevMinor: field(8), RMajor: field(9), RMinor: field(10)}
		size, namesize := int(field(6)), int(field(11))
		if field(12) != 0 {
			t.Fatalf("cpio: nonzero check field at %d", off)
		}
		nameEnd := off + 110 + namesize
		if nameEnd > len(b) || b[nameEnd-1] != 0 {
			t.Fatalf("cpio: bad name at %d", off)
		}
		r.Name = string(b[off+110 : nameEnd-1])
		dataOff := nameEnd + pad4(nameEnd)
		if dataOff+size > len(b) {
			t.Fatalf("cpio: truncated data for %q", r.Name)
		}
		r.Data = b[dataOff : dataOff+size]
		off = dataOff + size + pad4(dataOff+size)
		if r.Name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("cpio: %d bytes after trailer", len(b)-off)
			}
			return recs
		}
		recs = append(recs, r)
	}
}

// mustRead reads a file or fails the test.
func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
