package faultsuite

import (
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
	"github.com/themisfs/themis/vmm/qemu"
)

// shmTmpfsMiB is the size of the full /dev/shm of shm-enospc: less than
// one guest's RAM (128 MiB), room for a machine's work dir.
const shmTmpfsMiB = 8

// shmENOSPC points the daemon's scratch dir, where guest RAM lives, at a
// tmpfs of shmTmpfsMiB (a full /dev/shm, as a container's 64 MiB one is
// for a few guests) and asks for a session: CreateSession fails
// RESOURCE_EXHAUSTED naming that dir and its free space, nothing is left
// in it, and the daemon and the bystander (whose RAM is in the suite's
// scratch dir) answer. Back on the suite's scratch dir, a session boots.
// Before the fix the RAM file was sparse: the first page the tmpfs could
// not back was a SIGBUS, in QEMU (the boot failed INTERNAL, "guest died")
// or, when the daemon read it first, in the daemon, and every session died.
func shmENOSPC(t *testing.T, s *suite, r *result) {
	small, err := os.MkdirTemp(dirs.Work, "shm-") // not in the counted temp dir
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(small); err != nil {
			t.Error(err)
		}
	})
	scratchtest.Mount(t, small, shmTmpfsMiB)
	t.Setenv(qemu.ScratchEnv, small)
	t0 := time.Now()
	_, err = s.c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	msg := status.Convert(err).Message()
	if code(err) != codes.ResourceExhausted || !strings.Contains(msg, small) || !strings.Contains(msg, "MiB free") {
		t.Errorf("CreateSession with guest RAM on a %d MiB tmpfs: %v; want RESOURCE_EXHAUSTED naming %s and its free space", shmTmpfsMiB, err, small)
	}
	r.note("CreateSession with the scratch dir on a %d MiB tmpfs: %s in %v (%q)", shmTmpfsMiB, code(err),
		time.Since(t0).Round(time.Millisecond), clip(msg))
	s.probe(t, r)
	if ents, err := os.ReadDir(small); err != nil || len(ents) != 0 {
		t.Errorf("left in the full tmpfs: %v %v", ents, err)
	}
	if err := os.Setenv(qemu.ScratchEnv, dirs.Scratch); err != nil {
		t.Fatal(err)
	}
	id, _ := s.create(t)
	r.note("then a session in the suite's scratch dir booted and was deleted in %v", s.delete(t, id, 10*time.Second).Round(time.Millisecond))
}
