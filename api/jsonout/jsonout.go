package jsonout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The messages Decode finds by name.
	_ "github.com/themisfs/themis/api/proto/themis/v1"
)

// SchemaKey is the key Encode adds in front of the message's fields.
const SchemaKey = "schema"

// Package is the proto package every schema is a message of.
const Package = "themis.v1"

// MaxSize bounds what Decode reads: a shard's result with its state keys
// stays far below it.
const MaxSize = 256 << 20

// Encode renders m: protojson with the proto field names, compacted into
// one stable form (protojson adds spaces at random per binary to keep
// callers from its bytes), "schema" first, and indented by two spaces
// when multiline, else on one line (JSON lines).
func Encode(m proto.Message, multiline bool) ([]byte, error) {
	name := m.ProtoReflect().Descriptor().FullName()
	if name.Parent() != Package {
		return nil, fmt.Errorf("encode json: %s is not a message of %s", name, Package)
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode json %s: %w", name, err)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, raw); err != nil {
		return nil, fmt.Errorf("encode json %s: %w", name, err)
	}
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "{%q:%q", SchemaKey, name)
	if rest := bytes.TrimPrefix(body.Bytes(), []byte("{")); !bytes.Equal(rest, []byte("}")) {
		doc.WriteByte(',')
		doc.Write(rest)
	} else {
		doc.WriteByte('}')
	}
	if !multiline {
		return doc.Bytes(), nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, doc.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("encode json %s: %w", name, err)
	}
	return out.Bytes(), nil
}

// Schema is the schema b names, checked to be a message of Package that
// this binary knows.
func Schema(b []byte) (protoreflect.FullName, error) {
	if len(b) > MaxSize {
		return "", fmt.Errorf("decode json: %d bytes, more than %d", len(b), MaxSize)
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(b, &head); err != nil {
		return "", fmt.Errorf("decode json: %w", err)
	}
	raw, ok := head[SchemaKey]
	if !ok {
		return "", fmt.Errorf("decode json: no %q key: not a themisctl --json document", SchemaKey)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("decode json: %q: want a string: %w", SchemaKey, err)
	}
	name := protoreflect.FullName(s)
	if !name.IsValid() || name.Parent() != Package {
		return "", fmt.Errorf("decode json: %q is %q: want a message of %s", SchemaKey, s, Package)
	}
	if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
		return "", fmt.Errorf("decode json: %q names %s, which this build does not know: %w", SchemaKey, name, err)
	}
	return name, nil
}

// Decode reads one document Encode wrote into a new message of the type
// its schema names.
func Decode(b []byte) (proto.Message, error) {
	name, err := Schema(b)
	if err != nil {
		return nil, err
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	m := mt.New().Interface()
	return m, unmarshalBody(b, name, m)
}

// DecodeInto reads one document Encode wrote into m, which must be the
// message its schema names.
func DecodeInto(b []byte, m proto.Message) error {
	name, err := Schema(b)
	if err != nil {
		return err
	}
	if want := m.ProtoReflect().Descriptor().FullName(); name != want {
		return fmt.Errorf("decode json: %q is %s, want %s", SchemaKey, name, want)
	}
	return unmarshalBody(b, name, m)
}

// unmarshalBody decodes b without its schema key into m, strictly.
func unmarshalBody(b []byte, name protoreflect.FullName, m proto.Message) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("decode json %s: %w", name, err)
	}
	delete(fields, SchemaKey)
	body, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("decode json %s: %w", name, err)
	}
	if err := protojson.Unmarshal(body, m); err != nil {
		return fmt.Errorf("decode json %s: %w", name, err)
	}
	return nil
}

// ErrNotJSONLines is DecodeLines' error for a stream with no document.
var ErrNotJSONLines = errors.New("decode json lines: no document")

// DecodeLines reads JSON lines, one document per non-empty line.
func DecodeLines(b []byte) ([]proto.Message, error) {
	var out []proto.Message
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := Decode([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, m)
	}
	if out == nil {
		return nil, ErrNotJSONLines
	}
	return out, nil
}
