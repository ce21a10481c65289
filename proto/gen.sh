#!/usr/bin/env bash
# Regenerates the Go code for proto/meridian/v1/*.proto. Needs protoc (Debian: protobuf-compiler)
# and the plugins: go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#                  go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
protoc -I proto \
  --go_out=. --go_opt=module=meridian \
  --go-grpc_out=. --go-grpc_opt=module=meridian \
  proto/meridian/v1/api.proto proto/meridian/v1/peer.proto proto/meridian/v1/streams.proto
