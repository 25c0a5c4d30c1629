package qemu

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRAMDeltasModel checks the shadow + undo-log bookkeeping against a naive
// model that keeps a full copy of RAM per checkpoint.
func TestRAMDeltasModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		mem := make([]byte, 64*pageSize)
		var d *ramDeltas
		var model [][]byte
		for step := 0; step < 200; step++ {
			switch op := rng.IntN(11); {
			case op < 6: // dirty some bytes
				for range rng.IntN(5) + 1 {
					mem[rng.IntN(len(mem))] = byte(rng.Uint32())
				}
			case op < 8: // checkpoint
				if d == nil {
					d = newRAMDeltas(mem)
				} else {
					d.push(mem)
				}
				model = append(model, bytes.Clone(mem))
			case op == 10: // delete a random checkpoint
				if len(model) == 0 {
					continue
				}
				i := rng.IntN(len(model))
				d.remove(i)
				model = append(model[:i], model[i+1:]...)
				if len(model) == 0 {
					d = nil
				}
			default: // restore to a random checkpoint on the path
				if len(model) == 0 {
					continue
				}
				n := rng.IntN(len(model)) + 1
				d.restore(mem, n)
				model = model[:n]
				if !bytes.Equal(mem, model[n-1]) {
					t.Fatalf("seed %d step %d: RAM after restore to %d differs from the model", seed, step, n)
				}
				if d.depth() != len(model) {
					t.Fatalf("seed %d step %d: depth %d, want %d", seed, step, d.depth(), len(model))
				}
			}
		}
	}
}

func BenchmarkRAMDeltasRestore128MiB(b *testing.B) {
	mem := make([]byte, 128<<20)
	d := newRAMDeltas(mem)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for p := 0; p < 64; p++ {
			mem[p*7919*pageSize%len(mem)]++
		}
		d.restore(mem, 1)
	}
}
