#!/usr/bin/env bash
# Builds the NATS server the distributed-broker tests run (a three-node
# cluster with JetStream and MQTT, internal/testenv.StartNATSCluster) from
# the Go module proxy, once, into .cache/nats/<version>/ (git-ignored), and
# prints its path. Later runs find it there and work offline.
#
#   scripts/nats-server.sh      # make test and the tests run it
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=v2.15.2
DIR=$PWD/.cache/nats/$VERSION
BIN=$DIR/nats-server

if [[ ! -x $BIN ]]; then
  mkdir -p "$DIR"
  # go test runs packages in parallel: one build at a time.
  exec 9>"$DIR/.lock"
  flock -w 600 9 || { echo "nats-server.sh: another build holds $DIR/.lock" >&2; exit 2; }
  if [[ ! -x $BIN ]]; then
    echo "nats-server.sh: building nats-server $VERSION from the Go module proxy" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # Outside this module (its go.mod must not change), into a temporary
    # GOBIN, then moved: a half-written binary is never at $BIN.
    (cd "$tmp" && GOBIN=$tmp/bin GOFLAGS=-mod=mod timeout 900 go install "github.com/nats-io/nats-server/v2@$VERSION")
    mv "$tmp/bin/nats-server" "$BIN"
  fi
fi
echo "$BIN"
