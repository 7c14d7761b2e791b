#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance)
# against toolbus at both requirement sets, 2025-11-25 and 2026-07-28, with the
# fixture features served by an expert agent over MQTT (cmd/conformance-agent).
#
#   scripts/conformance.sh            # or: make conformance
#
# What it does:
#   - installs the pinned suite and the Node.js 22 it needs from
#     conformance/suite/package{,-lock}.json into .cache/conformance (git-ignored)
#     with scripts/npm-tools.sh (npm ci); once installed at those pins it does
#     not call npm again, so later runs work offline;
#   - builds toolbus, conformance-agent and conformance-proxy into bin/;
#   - starts `toolbus serve` on free loopback ports with a fresh data dir, an
#     expert-agent identity for the fixture agent and a token for the suite;
#   - starts the fixture agent, and conformance-proxy, which adds the token to
#     every request (the suite cannot send one) and passes Host and Origin
#     through unchanged, so the gateway's own DNS-rebinding checks are tested;
#   - runs each revision against http://localhost:PROXYPORT/api/v1/mcp, keeps
#     the suite's checks.json under results/conformance/<rev>/ (git-ignored)
#     and the processes' logs under results/conformance/logs/;
#   - prints the failing scenarios, then one line per revision
#     `conformance <rev>: N passed, M failed` (scored scenarios) and one
#     `conformance <rev>, not-scored scenarios (reported, never gating): N of M pass`;
#   - exits non-zero on any failure of a scored scenario that
#     conformance/expected-failures.yaml does not list, on a listed entry that
#     passes, or when the harness itself fails. Not-scored failures are
#     reported only.
#
# Environment: CONFORMANCE_REVISIONS (default "2025-11-25 2026-07-28"),
# CONFORMANCE_TIMEOUT_MS (per scenario, default 30000),
# CONFORMANCE_CALL_TIMEOUT (the gateway's --call-timeout, default 20s).
set -euo pipefail
cd "$(dirname "$0")/.."

REVISIONS=${CONFORMANCE_REVISIONS:-"2025-11-25 2026-07-28"}
TIMEOUT_MS=${CONFORMANCE_TIMEOUT_MS:-30000}
CALL_TIMEOUT=${CONFORMANCE_CALL_TIMEOUT:-20s}
EXPECTED=conformance/expected-failures.yaml
CACHE=.cache/conformance
RESULTS=results/conformance
LOGS=$RESULTS/logs
NODE=$CACHE/node_modules/.bin/node
SUITE=$CACHE/node_modules/@modelcontextprotocol/conformance

say() { echo "conformance.sh: $*" >&2; }
die() { say "$*"; exit 2; }

# --- install ------------------------------------------------------------------
# The pinned suite and Node.js 22 (scripts/npm-tools.sh: npm ci once, then
# offline).
scripts/npm-tools.sh || die "scripts/npm-tools.sh failed"
[[ -x $NODE && -f $SUITE/dist/index.js ]] || die "scripts/npm-tools.sh left no suite in $CACHE"

# --- build --------------------------------------------------------------------
[[ -d cmd/conformance-agent ]] || die "cmd/conformance-agent is missing"
mkdir -p bin
go build -o bin/ ./cmd/toolbus ./cmd/conformance-agent ./cmd/conformance-proxy

# --- start --------------------------------------------------------------------
rm -rf "$RESULTS"
mkdir -p "$LOGS"
work=$(mktemp -d)
pids=()     # gateway, agent, proxy: stopped on exit
suite_pid= # the suite while it runs
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local rc=$?
  [[ -n $suite_pid ]] && pids+=("$suite_pid")
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    # Each stops within its own shutdown deadline; after 15 s it is killed.
    for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for_line FILE PATTERN PID prints the first line of FILE matching
# PATTERN, waiting up to 20 s; it fails early if PID exits.
wait_for_line() {
  local line
  for _ in $(seq 1 200); do
    if line=$(grep -m1 -E "$2" "$1" 2>/dev/null); then
      echo "$line"
      return 0
    fi
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

bin/toolbus init --data-dir "$work/data" >/dev/null || die "toolbus init failed"
bin/toolbus mqtt-user add --data-dir "$work/data" --username conformance-agent --role expert-agent \
  --generate-password >"$work/agent.out" 2>&1 || { cat "$work/agent.out" >&2; die "mqtt-user add failed"; }
agent_password=$(tail -n 1 "$work/agent.out")
bin/toolbus token create --data-dir "$work/data" --user conformance --name "make conformance" --ttl 2h \
  >"$work/token.out" 2>&1 || { cat "$work/token.out" >&2; die "token create failed"; }
token=$(tail -n 1 "$work/token.out")

bin/toolbus serve --data-dir "$work/data" --http-addr 127.0.0.1:0 --mqtt-addr 127.0.0.1:0 \
  --call-timeout "$CALL_TIMEOUT" --log-level info >"$work/serve.out" 2>"$LOGS/gateway.log" &
pids+=($!)
line=$(wait_for_line "$work/serve.out" 'mqtt://' "${pids[-1]}") ||
  { tail -n 20 "$LOGS/gateway.log" >&2; die "toolbus serve did not start"; }
gateway=$(sed -E 's|.*http://([^/ ]+)/.*|\1|' <<<"$line")
mqtt=$(sed -E 's|.*mqtt://([^ ]+).*|\1|' <<<"$line")

TOOLBUS_AGENT_PASSWORD=$agent_password bin/conformance-agent --broker-url "tcp://$mqtt" \
  --username conformance-agent >"$LOGS/agent.out" 2>"$LOGS/agent.log" &
pids+=($!)
agent_pid=${pids[-1]}

TOOLBUS_PROXY_TOKEN=$token bin/conformance-proxy --target "http://$gateway" \
  >"$work/proxy.out" 2>"$LOGS/proxy.log" &
pids+=($!)
line=$(wait_for_line "$work/proxy.out" '^conformance-proxy: ' "${pids[-1]}") ||
  { tail -n 20 "$LOGS/proxy.log" >&2; die "conformance-proxy did not start"; }
proxy_port=$(sed -E 's|^conformance-proxy: http://[^ ]*:([0-9]+) .*|\1|' <<<"$line")
url="http://localhost:$proxy_port/api/v1/mcp"

# Ready means: the gateway answers /readyz, and the fixture agent's tools
# are listed through the proxy (so the token, the proxy and the agent's
# connection to the broker all work before the first scenario).
ready=
for _ in $(seq 1 300); do
  kill -0 "$agent_pid" 2>/dev/null || { tail -n 20 "$LOGS/agent.log" >&2; die "conformance-agent exited"; }
  if curl --noproxy '*' -fsS --max-time 5 "http://$gateway/readyz" >/dev/null 2>&1 &&
    curl --noproxy '*' -sS --max-time 5 "$url" -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' \
      -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"conformance.sh","version":"1"}}}}' \
      2>/dev/null | grep -q '"test_simple_text"'; then
    ready=1
    break
  fi
  sleep 0.1
done
[[ -n $ready ]] || { tail -n 20 "$LOGS/gateway.log" "$LOGS/agent.log" "$LOGS/proxy.log" >&2; die "the gateway did not list the fixture agent's tools within 30 s"; }
say "gateway http://$gateway, broker mqtt://$mqtt, suite -> $url"

# --- run ----------------------------------------------------------------------
status=0
for rev in $REVISIONS; do
  out=$RESULTS/$rev
  mkdir -p "$out"
  say "running $rev (suite log: $out/suite.log)"
  # In the background and waited for, so that a signal stops the script
  # (and, through cleanup, the suite) at once rather than after the suite.
  "$NODE" "$SUITE/dist/index.js" server --url "$url" --requirements "$rev" --timeout "$TIMEOUT_MS" -o "$out" \
    >"$out/suite.log" 2>&1 &
  suite_pid=$!
  suite_rc=0
  wait "$suite_pid" || suite_rc=$?
  suite_pid=
  report_rc=0
  "$NODE" scripts/conformance-report.mjs --revision "$rev" --results "$out" --suite-dir "$SUITE" \
    --expected "$EXPECTED" --suite-exit "$suite_rc" || report_rc=$?
  case $report_rc in
  0) ;;
  1) [[ $status == 2 ]] || status=1 ;;
  *) status=2 ;;
  esac
done

case $status in
0) say "every scored failure is listed in $EXPECTED" ;;
1) say "unexpected failures (or stale entries in $EXPECTED): see above and $RESULTS/<rev>/" ;;
*) say "the harness could not score a run: see above" ;;
esac
# The result lines last: not scored first, then one scored line per revision.
for line in 2 1; do
  for rev in $REVISIONS; do
    if [[ -f $RESULTS/$rev/summary.txt ]]; then sed -n "${line}p" "$RESULTS/$rev/summary.txt"; fi
  done
done
exit "$status"
