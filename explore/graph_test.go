package explore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// graphSystem's states are the nodes of a directed graph and its ops are
// edges: op i (a mkdir of "e-i", only a label here) follows the i-th edge of
// the current node, or fails with ENOENT when there is none.
type graphSystem struct {
	adj     [][]int
	cur     int
	stack   []struct{ id, node int }
	next    int
	reached map[int]bool
	// flaky makes edge 0 follow edge 1 after an odd number of restores: a
	// System that does not replay deterministically.
	flaky    bool
	restores int
}

func (g *graphSystem) Checkpoint(ctx context.Context) (CheckpointID, error) {
	g.next++
	g.stack = append(g.stack, struct{ id, node int }{g.next, g.cur})
	return fmt.Sprint(g.next), nil
}

func (g *graphSystem) top(id CheckpointID) (int, error) {
	if len(g.stack) == 0 || fmt.Sprint(g.stack[len(g.stack)-1].id) != id {
		return 0, fmt.Errorf("graph: checkpoint %s is not the top of the stack", id)
	}
	return g.stack[len(g.stack)-1].node, nil
}

func (g *graphSystem) Restore(ctx context.Context, id CheckpointID) error {
	n, err := g.top(id)
	g.cur = n
	g.restores++
	return err
}

func (g *graphSystem) Drop(ctx context.Context, id CheckpointID) error {
	if _, err := g.top(id); err != nil {
		return err
	}
	g.stack = g.stack[:len(g.stack)-1]
	return nil
}

func (g *graphSystem) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	var i int
	if _, err := fmt.Sscanf(op.GetMkdir().GetPath(), "e-%d", &i); err != nil {
		return nil, err
	}
	if g.flaky && i == 0 && g.restores%2 == 1 && len(g.adj[g.cur]) > 1 {
		i = 1
	}
	if i >= len(g.adj[g.cur]) {
		return []LaneResult{{Lane: "a", Errno: 2}, {Lane: "b", Errno: 2}}, nil
	}
	g.cur = g.adj[g.cur][i]
	return []LaneResult{{Lane: "a"}, {Lane: "b"}}, nil
}

func (g *graphSystem) Fingerprint(ctx context.Context) ([]LaneState, error) {
	g.reached[g.cur] = true
	root := binary.BigEndian.AppendUint64(nil, uint64(g.cur))
	return []LaneState{{Lane: "a", Root: root}, {Lane: "b", Root: root}}, nil
}

func (g *graphSystem) Leaves(ctx context.Context, lane string) ([]*agentv1.Entry, error) {
	return nil, nil
}

// edgeGen proposes every edge label 0..k-1, shuffled by rng.
type edgeGen struct{ k int }

func (e edgeGen) Draw(rng *rand.Rand, n int) []*agentv1.Request {
	perm := rng.Perm(e.k)
	var out []*agentv1.Request
	for _, i := range perm[:min(n, e.k)] {
		out = append(out, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: fmt.Sprintf("e-%d", i)}}})
	}
	return out
}

// bfs is the naive model: nodes within depth edges of node 0, each with
// its distance from it.
func bfs(adj [][]int, depth int) map[int]int {
	seen := map[int]int{0: 0}
	frontier := []int{0}
	for d := 0; d < depth; d++ {
		var next []int
		for _, u := range frontier {
			for _, v := range adj[u] {
				if _, ok := seen[v]; !ok {
					seen[v] = d + 1
					next = append(next, v)
				}
			}
		}
		frontier = next
	}
	return seen
}

// byLevel counts the nodes of a bfs result at each distance.
func byLevel(seen map[int]int) []int {
	var by []int
	for _, d := range seen {
		for len(by) <= d {
			by = append(by, 0)
		}
		by[d]++
	}
	return by
}

func randomGraph(rng *rand.Rand, n, k int) [][]int {
	adj := make([][]int, n)
	for u := range adj {
		for range rng.IntN(k + 1) {
			adj[u] = append(adj[u], rng.IntN(n))
		}
	}
	return adj
}

func TestDFSMatchesBFS(t *testing.T) {
	t.Parallel()
	for trial := range 300 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(trial), 42))
			n, k, depth := 1+rng.IntN(30), 1+rng.IntN(4), 1+rng.IntN(6)
			adj := randomGraph(rng, n, k)
			g := &graphSystem{adj: adj, reached: map[int]bool{}}
			c, err := NewChecker(g, Config{Depth: depth, Branching: k, Seed: uint64(trial), Generator: edgeGen{k}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := bfs(adj, depth)
			if len(g.reached) != len(want) || res.Unique != len(want) {
				t.Fatalf("graph %v depth %d: DFS reached %v (unique %d), BFS %v", adj, depth, g.reached, res.Unique, want)
			}
			for v := range want {
				if !g.reached[v] {
					t.Fatalf("graph %v depth %d: DFS missed node %d", adj, depth, v)
				}
			}
			if lv := byLevel(want); !slices.Equal(res.UniqueByDepth, lv) {
				t.Errorf("graph %v depth %d: unique by depth %v, BFS levels %v", adj, depth, res.UniqueByDepth, lv)
			}
			if res.Stopped != StopDone || len(res.Findings) != 0 || len(g.stack) != 0 {
				t.Errorf("stopped %q, findings %v, checkpoints left %d", res.Stopped, res.Findings, len(g.stack))
			}
		})
	}
}

func TestReplaySampleFindsNondeterminism(t *testing.T) {
	t.Parallel()
	adj := [][]int{{1, 2}, {3, 4}, {5, 6}, {0}, {0}, {0}, {0}}
	tests := []struct {
		name  string
		flaky bool
		want  int
	}{
		{"deterministic", false, 0},
		{"flaky", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := &graphSystem{adj: adj, reached: map[int]bool{}, flaky: tt.flaky}
			c, err := NewChecker(g, Config{Depth: 3, Branching: 2, Generator: edgeGen{2}, ReplaySample: 100})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, f := range res.Findings {
				if f.Kind == KindReplay {
					n++
				}
			}
			if (n > 0) != (tt.want > 0) {
				t.Errorf("replay findings %d, want %d; all: %+v", n, tt.want, res.Findings)
			}
			if res.Replays == 0 {
				t.Error("no replays counted")
			}
		})
	}
}
