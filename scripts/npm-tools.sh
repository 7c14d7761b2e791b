#!/usr/bin/env bash
# Installs the npm tools the tests need, pinned in conformance/suite/
# package{,-lock}.json, into .cache/conformance (git-ignored) with npm ci:
#   - the official MCP conformance suite (@modelcontextprotocol/conformance),
#     which scripts/conformance.sh runs;
#   - the MCP reference server @modelcontextprotocol/server-everything, which
#     the Go tests start on stdio (internal/testenv.ServerEverything);
#   - the Node.js 22 both need (the registry's prebuilt node-linux-<arch>).
#
#   scripts/npm-tools.sh        # make test and scripts/conformance.sh run it
#
# Idempotent: once .cache/conformance holds those pins (and the same
# package-lock.json) it does not call npm again, so later runs work offline.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=conformance/suite
CACHE=.cache/conformance
NODE=$CACHE/node_modules/.bin/node
SUITE=$CACHE/node_modules/@modelcontextprotocol/conformance
EVERYTHING=$CACHE/node_modules/@modelcontextprotocol/server-everything

say() { echo "npm-tools.sh: $*" >&2; }
die() { say "$*"; exit 2; }

# pinned NAME prints the version conformance/suite/package.json pins NAME to.
pinned() {
  sed -n -E "s|^ *\"$1\": *\"([^\"]+)\".*|\1|p" "$PINS/package.json" | head -n 1
}
# installed DIR prints the version of the package installed in DIR, if any.
installed() {
  [[ -f $1/package.json ]] || return 0
  sed -n -E 's/^ *"version": *"([^"]+)".*/\1/p' "$1/package.json" | head -n 1
}

suite_pin=$(pinned @modelcontextprotocol/conformance)
everything_pin=$(pinned @modelcontextprotocol/server-everything)
node_pin=$(pinned "node-linux-$(uname -m | sed -e 's/x86_64/x64/' -e 's/aarch64/arm64/')")
[[ -n $suite_pin ]] || die "$PINS/package.json pins no @modelcontextprotocol/conformance"
[[ -n $everything_pin ]] || die "$PINS/package.json pins no @modelcontextprotocol/server-everything"
[[ -n $node_pin ]] || die "$PINS/package.json pins no Node.js for $(uname -s)/$(uname -m)"
what="suite $suite_pin, server-everything $everything_pin and Node.js $node_pin"

install_ok() {
  [[ $(installed "$SUITE") == "$suite_pin" ]] &&
    [[ $(installed "$EVERYTHING") == "$everything_pin" ]] &&
    [[ -x $NODE ]] && [[ $("$NODE" --version 2>/dev/null) == "v$node_pin" ]] &&
    cmp -s "$PINS/package-lock.json" "$CACHE/package-lock.json"
}
if install_ok; then
  say "$what already in $CACHE"
  exit 0
fi
command -v npm >/dev/null || die "npm is needed once, to install $what into $CACHE"
say "installing $what into $CACHE (npm ci)"
start=$SECONDS
rm -rf "$CACHE"
mkdir -p "$CACHE"
cp "$PINS/package.json" "$PINS/package-lock.json" "$CACHE/"
# npm itself may run on an older Node than these packages need; the engine
# warnings that causes are noise (they run on the Node installed here).
npm ci --prefix "$CACHE" --no-audit --no-fund --loglevel=error --engine-strict=false >"$CACHE/npm.log" 2>&1 ||
  { cat "$CACHE/npm.log" >&2; die "npm ci failed"; }
install_ok || die "after npm ci, $CACHE does not hold $what (see $CACHE/npm.log)"
say "installed in $((SECONDS - start)) s ($(du -sh "$CACHE" | cut -f1))"
