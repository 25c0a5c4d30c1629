// Command testcount reads `go test -json` on stdin and fails unless at
// least -min tests matching -run ran (passed) and none failed. The
// hardware-KVM job pipes the gated tests through it so that a host that
// silently skipped them does not pass:
//
//	THEMIS_REQUIRE_KVM=1 go test -json -run 'KVMLinux' ./vmm/kvm/... | go run ./cmd/testcount -run '^TestKVMLinux' -min 3
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"

	"github.com/themisfs/themis/internal/testcount"
)

func main() {
	run := flag.String("run", ".", "regular expression for the test names to count")
	min := flag.Int("min", 1, "fail unless at least this many matching tests ran")
	flag.Parse()
	re, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testcount: -run: %v\n", err)
		os.Exit(2)
	}
	r, err := testcount.Count(os.Stdin, re)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("testcount: %d ran (%d passed, %d failed), %d skipped\n", r.Ran(), len(r.Passed), len(r.Failed), len(r.Skipped))
	for _, n := range r.Passed {
		fmt.Println("  pass", n)
	}
	if err := r.Check(*min); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
