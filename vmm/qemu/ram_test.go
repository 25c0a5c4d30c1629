package qemu

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/themisfs/themis/fork"
)

// TestRAMTreeModel checks the page scan feeding fork.Tree against a naive
// model that keeps a full copy of RAM per checkpoint. RAM changes behind
// the tree's back, as QEMU's guest writes do; only the scan finds them.
func TestRAMTreeModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		mem := make([]byte, 64*pageSize)
		var r *ramTree
		var ids []fork.ID
		var model [][]byte
		for step := 0; step < 200; step++ {
			switch op := rng.IntN(11); {
			case op < 6: // dirty some bytes
				for range rng.IntN(5) + 1 {
					mem[rng.IntN(len(mem))] = byte(rng.Uint32())
				}
			case op < 8: // checkpoint
				if r == nil {
					var err error
					if r, err = newRAMTree(mem); err != nil {
						t.Fatal(err)
					}
				}
				id, err := r.checkpoint()
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
				model = append(model, bytes.Clone(mem))
			case op == 10: // delete a random checkpoint
				if len(model) == 0 {
					continue
				}
				i := rng.IntN(len(model))
				if err := r.delete(ids[i]); err != nil {
					t.Fatal(err)
				}
				ids = append(ids[:i], ids[i+1:]...)
				model = append(model[:i], model[i+1:]...)
			default: // restore to a random checkpoint on the path
				if len(model) == 0 {
					continue
				}
				n := rng.IntN(len(model)) + 1
				if _, err := r.restore(ids[n-1]); err != nil {
					t.Fatal(err)
				}
				ids, model = ids[:n], model[:n]
				if !bytes.Equal(mem, model[n-1]) {
					t.Fatalf("seed %d step %d: RAM after restore to %d differs from the model", seed, step, n)
				}
				if r.depth() != len(model) {
					t.Fatalf("seed %d step %d: depth %d, want %d", seed, step, r.depth(), len(model))
				}
			}
		}
	}
}

func BenchmarkRAMTreeRestore128MiB(b *testing.B) {
	mem := make([]byte, 128<<20)
	r, err := newRAMTree(mem)
	if err != nil {
		b.Fatal(err)
	}
	id, err := r.checkpoint()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for p := 0; p < 64; p++ {
			mem[p*7919*pageSize%len(mem)]++
		}
		if _, err := r.restore(id); err != nil {
			b.Fatal(err)
		}
	}
}
