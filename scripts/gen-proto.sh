#!/usr/bin/env bash
# Regenerates the committed Go code from api/proto. Needs protoc (Debian
# protobuf-compiler) and protoc-gen-go pinned in tools/go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(pwd)/.bin"
mkdir -p "$bin"
(cd tools && GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go)
export PATH="$bin:$PATH"
for dir in api/proto/themis/agent/v1; do
  protoc --proto_path=api/proto --go_out=api/proto --go_opt=paths=source_relative "$dir"/*.proto
done
