package session_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"google.golang.org/protobuf/proto"
)

// TestOverlayLaneFake: an overlay lane gets two disks (upper lane<i>, lower
// lower<i>), is mounted as overlayfs with metacopy=off, and is fingerprinted
// from below as well.
func TestOverlayLaneFake(t *testing.T) {
	var cfgs []vmm.Config
	var mounts []*agentv1.Mount
	var below []string
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(c vmm.Config) vmm.Machine {
		cfgs = append(cfgs, c)
		return &recordingMachine{Machine: &sessiontest.Machine{}, mounts: &mounts, below: &below}
	})
	ctx := context.Background()
	in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2", "overlay:name=ov"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, in.ID)
	var serials []string
	for _, d := range cfgs[0].Disks {
		serials = append(serials, d.Serial)
	}
	if want := []string{"lane0", "lane1", "lower1"}; !reflect.DeepEqual(serials, want) {
		t.Errorf("disks %v, want %v", serials, want)
	}
	want := &agentv1.Mount{Lane: "ov", Device: "serial:lane1", LowerDevice: "serial:lower1", Fstype: "overlay", LayerFstype: "ext2", Options: launch.OverlayMountOptions}
	if len(mounts) != 2 || !proto.Equal(mounts[1], want) || mounts[0].GetLowerDevice() != "" {
		t.Errorf("mounts %v, want the ext2 lane plain and %v", mounts, want)
	}
	if !strings.Contains(launch.OverlayMountOptions, "metacopy=off") {
		t.Errorf("overlay options %q without metacopy=off", launch.OverlayMountOptions)
	}
	fps, err := m.Fingerprint(ctx, in.ID, agentv1.TimeMode_TIME_MODE_NONE, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fps) != 2 || fps[0].BelowRoot != nil || fps[1].BelowRoot == nil || !reflect.DeepEqual(below, []string{"ov"}) {
		t.Errorf("fingerprints %+v (below asked of %v): want a root from below for the overlay lane only", fps, below)
	}

	// The disks' images: without a seed both layers are the empty ext2;
	// with seed=1 the lower layer is an ext2:seed=1 lane's image and the
	// upper one stays empty.
	hashes := func(lanes ...string) map[string][32]byte {
		t.Helper()
		cfgs = nil
		in, err := m.Create(ctx, session.CreateOptions{Lanes: lanes})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Delete(ctx, in.ID)
		out := make(map[string][32]byte)
		for _, d := range cfgs[0].Disks {
			h, err := d.Device.Hash()
			if err != nil {
				t.Fatal(err)
			}
			out[d.Serial] = h
		}
		return out
	}
	if h := hashes("ext2", "overlay"); h["lane0"] != h["lane1"] || h["lane1"] != h["lower1"] {
		t.Error("unseeded overlay lane: want both layers the empty ext2 image")
	}
	if h := hashes("ext2:seed=1", "overlay:seed=1", "ext2:name=empty"); h["lane0"] != h["lower1"] || h["lane1"] != h["lane2"] || h["lane1"] == h["lower1"] {
		t.Error("overlay:seed=1: want the lower layer ext2:seed=1's image and the upper layer the empty ext2")
	}
}

// recordingMachine is a fakeMachine that records Mount requests and the
// lanes fingerprinted from below.
type recordingMachine struct {
	*sessiontest.Machine
	mounts *[]*agentv1.Mount
	below  *[]string
}

func (r *recordingMachine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if mt := req.GetMount(); mt != nil {
		*r.mounts = append(*r.mounts, mt)
	}
	if fp := req.GetFingerprint(); fp.GetBelow() {
		*r.below = append(*r.below, fp.GetLane())
	}
	return r.Machine.Call(ctx, req)
}
