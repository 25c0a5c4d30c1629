package k8s

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The image recipe these manifests run (docs/image.md).
const (
	containerfile = "../Containerfile"
	buildImage    = "../../scripts/build-image.sh"
)

// defaultImageRE finds the name scripts/build-image.sh gives the image.
var defaultImageRE = regexp.MustCompile(`(?m)^image=\$\{THEMIS_IMAGE:-([^}]+)\}$`)

// containerfileEnv is the Containerfile's ENV NAME=value lines.
func containerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if kv, ok := strings.CutPrefix(l, "ENV "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	return env
}

// TestImage checks that every Job runs the image scripts/build-image.sh
// names by default, and that what a container sets of the image's
// environment agrees with the Containerfile.
func TestImage(t *testing.T) {
	b, err := os.ReadFile(buildImage)
	if err != nil {
		t.Fatal(err)
	}
	m := defaultImageRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no image=${THEMIS_IMAGE:-NAME} line", buildImage)
	}
	want := string(m[1])
	env := containerfileEnv(t)
	if env["THEMIS_CACHE_DIR"] == "" || env["THEMIS_GUEST_IMAGE"] == "" {
		t.Fatalf("%s: want ENV THEMIS_CACHE_DIR and THEMIS_GUEST_IMAGE, got %v", containerfile, env)
	}
	files, err := filepath.Glob("*-job.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no *-job.yaml: %v", err)
	}
	for _, f := range files {
		for _, j := range jobs(t, f) {
			for _, c := range j.Spec.Template.Spec.Containers {
				if c.Image != want {
					t.Errorf("%s: job %s container %s: image %q, want %q (scripts/build-image.sh's)", f, j.Name, c.Name, c.Image, want)
				}
				for _, e := range c.Env {
					if v, ok := env[e.Name]; ok && e.Value != v {
						t.Errorf("%s: container %s sets %s=%s, the image %s", f, c.Name, e.Name, e.Value, v)
					}
				}
			}
		}
	}
}

// guests is how many guests a pod of each shard Job may boot at once: a
// sweep one, an explore with automatic workers up to 8
// (exploration.AutoWorkerCount).
var guests = map[string]int{"sweep-job.yaml": 1, "explore-job.yaml": 8}

// guestRAM is a guest's RAM file in /dev/shm (vmm/qemu, 128 MiB by default).
var guestRAM = resource.MustParse("128Mi")

// TestShm checks that every Job that boots guests mounts a memory-backed
// emptyDir at /dev/shm with room for their RAM: the container's own is
// 64 MiB, and QEMU dies of SIGBUS when its RAM file does not fit.
func TestShm(t *testing.T) {
	for _, b := range batches {
		n, ok := guests[b.job]
		if !ok {
			t.Fatalf("%s: how many guests does it boot? (add it to guests)", b.job)
		}
		j := oneJob(t, b.job)
		c := oneContainer(t, j)
		var mount string
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/dev/shm" {
				mount = m.Name
			}
		}
		if mount == "" {
			t.Errorf("%s: container %s mounts nothing at /dev/shm", b.job, c.Name)
			continue
		}
		for _, v := range j.Spec.Template.Spec.Volumes {
			if v.Name != mount {
				continue
			}
			if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
				t.Errorf("%s: /dev/shm volume %s is not an emptyDir of medium Memory", b.job, v.Name)
				continue
			}
			need := guestRAM.DeepCopy()
			need.Mul(int64(n))
			if l := v.EmptyDir.SizeLimit; l == nil || l.Cmp(need) <= 0 {
				t.Errorf("%s: /dev/shm sizeLimit %v, want more than %d guests' RAM (%s)", b.job, l, n, need.String())
			}
		}
	}
}
