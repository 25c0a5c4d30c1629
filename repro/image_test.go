package repro

import (
	"strings"
	"testing"

	"github.com/themisfs/themis/oracle"
)

// TestReadmeImage: a finding found on a patched image says in its README
// which kernel and patch it needs, where the patch file is, and what a
// replay on the stock image showed; a stock kernel's finding says none of
// it.
func TestReadmeImage(t *testing.T) {
	patched := func(stock *Stock) *Image {
		return &Image{Kernel: "6.1.0-57-cloud-amd64 (cloud)", Key: "7988e70ac217",
			Patches: []ImageInput{{Name: "exfat-off-by-one.patch", BLAKE3: "77fc895833f5", File: PatchFile(0, "exfat-off-by-one.patch")}}, Stock: stock}
	}
	tests := []struct {
		name    string
		img     *Image
		want    []string
		notWant []string
	}{
		{"stock kernel", nil, nil, []string{"Needs a patched kernel", "patch-1"}},
		{"patch, not on stock", patched(&Stock{Kernel: "6.1.0-57-cloud-amd64 (cloud)"}),
			[]string{"Needs a patched kernel", "6.1.0-57-cloud-amd64 (cloud) with the same change", "exfat-off-by-one.patch (blake3 77fc895833f5): here as patch-1-exfat-off-by-one.patch", "does not reproduce: the change above causes it"}, nil},
		{"patch, on stock too", patched(&Stock{Kernel: "6.1.0-57-cloud-amd64 (cloud)", Reproduced: true}),
			[]string{"reproduces too: the stock kernel shows it"}, []string{"the change above causes it"}},
		{"no stock replay", patched(nil), []string{"here as patch-1-"}, []string{"stock image"}},
		{"no copy kept", &Image{Kernel: "k", Patches: []ImageInput{{Name: "a.patch", BLAKE3: "ab"}}}, []string{"a.patch (blake3 ab): no copy kept"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Finding{ID: "f-1", Kind: KindState, Detail: "lanes ext2 and exfat differ at f-00: size 0 != 1", Trace: []string{"create f-00 0644 excl"}}
			files, err := Generate(Input{Finding: f, Lanes: lanesOf(t, "ext2", "exfat"), Policy: oracle.MetisParity, Kernel: "k", Image: tt.img})
			if err != nil {
				t.Fatal(err)
			}
			readme := string(files["README"])
			for _, w := range tt.want {
				if !strings.Contains(readme, w) {
					t.Errorf("README lacks %q:\n%s", w, readme)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(readme, w) {
					t.Errorf("README has %q:\n%s", w, readme)
				}
			}
		})
	}
}
