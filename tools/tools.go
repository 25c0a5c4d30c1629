//go:build tools

// Package tools pins the code generators used by scripts/gen-proto.sh.
package tools

import (
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
