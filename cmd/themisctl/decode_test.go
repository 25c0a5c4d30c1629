package main

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
)

// decodeOut decodes a command's --json output strictly as the message m
// (its schema must name m's type), failing the test with the output
// otherwise: the one way the CLI's tests read --json.
func decodeOut(t testing.TB, out []byte, m proto.Message) {
	t.Helper()
	if err := jsonout.DecodeInto(out, m); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
}
