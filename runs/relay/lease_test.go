package relay

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// TestStart: a run's lease is a scratch dir of its own, named for its
// kind, and a session; Close ends the session and removes the dir, and a
// session that cannot be had leaves no dir behind.
func TestStart(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine { return &sessiontest.Machine{} })
	left := func() []string {
		t.Helper()
		ents, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	if _, _, err := Start(context.Background(), m, session.CreateOptions{}, "sweep"); !errors.Is(err, errkind.ErrInvalid) || len(left()) != 0 {
		t.Fatalf("Start without lanes = %v, leaving %v: want ErrInvalid and no dir", err, left())
	}
	l, ctx, err := Start(context.Background(), m, session.CreateOptions{Lanes: []string{"ext2"}}, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(l.Dir); err != nil || !st.IsDir() || !strings.Contains(l.Dir, "themis-sweep-") || ctx != l.Context() {
		t.Errorf("lease dir %s (%v), context the chain's %v: want a themis-sweep- dir", l.Dir, err, ctx == l.Context())
	}
	run := l.Run()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if names := left(); len(names) != 0 {
		t.Errorf("after Close the scratch parent holds %v: want nothing", names)
	}
	if run.Context().Err() == nil {
		t.Error("after Close the session's run goes on")
	}
}
