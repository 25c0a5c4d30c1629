//go:build !linux

// Command themis-nested-init is Linux-only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "themis-nested-init: Linux only")
	os.Exit(1)
}
