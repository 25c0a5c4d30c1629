package main

import (
	"os"
	"path/filepath"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestImageRef: a name or key goes to the daemon as it is; anything with a
// / is a directory, made absolute (the daemon has another working
// directory).
func TestImageRef(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"exfat-fix", "exfat-fix"},
		{"7988e70ac217", "7988e70ac217"},
		{"./img", filepath.Join(wd, "img")},
		{"imgs/a", filepath.Join(wd, "imgs", "a")},
		{"/var/cache/themis/images/k", "/var/cache/themis/images/k"},
		{"", ""},
	}
	for _, tt := range tests {
		var got string
		if err := (imageValue{&got}).Set(tt.in); err != nil || got != tt.want {
			t.Errorf("--image %q: %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestFindingImage: a replay boots the image asked for, else the patched
// image the finding was found on, else the lanes' own.
func TestFindingImage(t *testing.T) {
	stock := &themisv1.GuestImage{Key: "k-stock", KernelVersion: "6.1.0-1-cloud-amd64", Flavor: "cloud"}
	patched := &themisv1.GuestImage{Key: "k-patched", Flavor: "cloud", Patches: []*themisv1.ImageInput{{Name: "fix.patch", Blake3: "ab"}}}
	src := &themisv1.GuestImage{Key: "k-src", Flavor: "cloud", ModuleSources: []*themisv1.ImageInput{{Name: "/src/udf", Blake3: "cd"}}}
	tree := &themisv1.GuestImage{Key: "k-tree", Flavor: "custom"}
	tests := []struct {
		name  string
		img   *themisv1.GuestImage
		asked string
		want  string
	}{
		{"none kept", nil, "", ""},
		{"stock", stock, "", ""},
		{"patched", patched, "", "k-patched"},
		{"module source", src, "", "k-src"},
		{"kernel tree", tree, "", "k-tree"},
		{"asked wins", patched, "other", "other"},
	}
	for _, tt := range tests {
		if got := findingImage(&themisv1.Finding{Image: tt.img}, tt.asked); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestImageLine names the kernel, flavour, each patch and the image.
func TestImageLine(t *testing.T) {
	img := &themisv1.GuestImage{Key: "0123456789abcdef", KernelVersion: "6.1.0-1-cloud-amd64", Flavor: "cloud",
		Patches: []*themisv1.ImageInput{{Name: "fix.patch", Blake3: "fedcba9876543210"}}, BuiltModules: []string{"exfat"}}
	want := "6.1.0-1-cloud-amd64 (cloud), patch fix.patch fedcba987654, built exfat, image 0123456789ab"
	if got := imageLine(img); got != want {
		t.Errorf("imageLine = %q, want %q", got, want)
	}
	if got := imageLine(nil); got != "" {
		t.Errorf("imageLine(nil) = %q", got)
	}
}
