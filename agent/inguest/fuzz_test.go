package inguest

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/agent/internal/fuzzseed"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// FuzzServe feeds arbitrary bytes to Server.Serve over an empty root with
// Machine off, so no request can change the host.
func FuzzServe(f *testing.F) {
	for _, s := range fuzzseed.Seeds(f) {
		f.Add(s)
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Root: root} // no lanes, Machine off: nothing on the host changes
		var out bytes.Buffer
		err := s.Serve(struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), &out})
		if err != nil && !errors.Is(err, agent.ErrFrameTooLarge) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Serve = %v", err)
		}
		for {
			resp := new(agentv1.Response)
			if err := agent.ReadFrame(&out, resp); err != nil {
				if err != io.EOF {
					t.Fatalf("server wrote a bad frame: %v", err)
				}
				break
			}
		}
		ents, rerr := os.ReadDir(root)
		if rerr != nil || len(ents) != 0 {
			t.Fatalf("root changed: %v %v", ents, rerr)
		}
	})
}

var update = flag.Bool("update", false, "rewrite testdata/fuzz seed corpora")

// TestSeedCorpus keeps testdata/fuzz/FuzzServe equal to fuzzseed.Frames; run
// with -update to rewrite it.
func TestSeedCorpus(t *testing.T) {
	fuzzseed.CheckCorpus(t, filepath.Join("testdata", "fuzz", "FuzzServe"), *update)
}
