package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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

// writeProtoJSON prints a message as JSON with the proto field names
// (snake_case), the same names the API documents, indented.
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

// protoJSON encodes m with protojson and the proto field names, in one
// stable form: protojson adds spaces at random (fixed per binary) to keep
// callers from depending on its bytes, so its output is compacted, and
// indented by two spaces when multiline.
func protoJSON(m proto.Message, multiline bool) ([]byte, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	var out bytes.Buffer
	if multiline {
		err = json.Indent(&out, raw, "", "  ")
	} else {
		err = json.Compact(&out, raw)
	}
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return out.Bytes(), nil
}

// writeJSON prints a value that is not an API message (a library's
// result, or a view the CLI builds) as indented JSON with encoding/json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
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
