#!/usr/bin/env bash
# Regenerates the committed Go code from api/proto. Needs protoc (Debian
# protobuf-compiler; libprotobuf-dev ships google/protobuf/*.proto) and the
# generators pinned in tools/go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(pwd)/.bin"
mkdir -p "$bin"
(cd tools && GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
export PATH="$bin:$PATH"
protoc --proto_path=api/proto --proto_path=/usr/include \
  --go_out=api/proto --go_opt=paths=source_relative \
  --go-grpc_out=api/proto --go-grpc_opt=paths=source_relative \
  api/proto/themis/agent/v1/agent.proto api/proto/themis/v1/*.proto
