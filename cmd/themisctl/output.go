package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
)

// newTable is a writer that aligns tab-separated columns on stdout, as
// every table of the CLI does; Flush prints it.
func newTable() *tabwriter.Writer {
	return tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
}

// printMessage prints an API response: as JSON with --json
// (writeProtoJSON), else the human form human writes as a table.
func (g *globals) printMessage(m proto.Message, human func(w *tabwriter.Writer)) error {
	if g.json {
		return writeProtoJSON(m)
	}
	w := newTable()
	human(w)
	return w.Flush()
}

// writeProtoJSON prints a message as --json does (jsonout.Encode),
// indented.
func writeProtoJSON(m proto.Message) error {
	return printProtoJSON(m, true)
}

// writeProtoJSONLine prints a message as one line of JSON (JSON lines).
func writeProtoJSONLine(m proto.Message) error {
	return printProtoJSON(m, false)
}

func printProtoJSON(m proto.Message, multiline bool) error {
	b, err := protoJSON(m, multiline)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}

// protoJSON is m as --json prints it (jsonout.Encode: protojson with the
// proto names and a "schema" key naming the message).
func protoJSON(m proto.Message, multiline bool) ([]byte, error) {
	return jsonout.Encode(m, multiline)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// lanePath turns what a person types for a lane's root ("." or "/") into
// the API's "" and drops a leading "/".
func lanePath(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "." {
		return ""
	}
	return p
}
