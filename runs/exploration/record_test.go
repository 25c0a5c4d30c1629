package exploration

import (
	"fmt"
	"testing"
)

// TestTrail: however many reports come, the trail keeps at most
// maxTrailPoints, in order, evenly thinned, and always the last report.
func TestTrail(t *testing.T) {
	for _, n := range []int{0, 1, 5, maxTrailPoints - 1, maxTrailPoints, maxTrailPoints + 1, 10 * maxTrailPoints, 100003} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var tr trail
			for i := range n {
				tr.add(Progress{States: i + 1})
			}
			got := tr.all()
			switch {
			case n == 0 && got != nil:
				t.Fatalf("no reports: trail %v", got)
			case n == 0:
				return
			case len(got) > maxTrailPoints+1:
				t.Fatalf("%d points kept of %d, want at most %d", len(got), n, maxTrailPoints+1)
			case n <= maxTrailPoints-1 && len(got) != n:
				t.Fatalf("%d points kept of %d, want all", len(got), n)
			case got[len(got)-1].States != n:
				t.Fatalf("last point %d, want the last report %d", got[len(got)-1].States, n)
			case n > 10 && len(got) < maxTrailPoints/4:
				t.Fatalf("only %d points kept of %d", len(got), n)
			}
			gaps := map[int]bool{}
			for i := 1; i < len(got); i++ {
				d := got[i].States - got[i-1].States
				if d <= 0 {
					t.Fatalf("point %d (%d) not after %d", i, got[i].States, got[i-1].States)
				}
				if i < len(got)-1 {
					gaps[d] = true
				}
			}
			if len(gaps) > 1 {
				t.Errorf("uneven thinning: gaps %v", gaps)
			}
		})
	}
}
