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
# Then, unless CONFORMANCE_BRIDGE=0, the same suite against an upstream that
# passes it on its own, mark3labs/mcp-go's conformance example server
# (github.com/mark3labs/mcp-go/examples/conformance, built into
# bin/mcpgo-conformance), once directly and once through toolbus, MQTT and
# `expert-agent bridge` (docs/bridge.md):
#   - starts two mcp-go servers on free loopback ports (one for the direct
#     runs, one behind the bridge), and a second `toolbus serve` with its own
#     data dir, expert-agent identity (mcpgo), token and conformance-proxy,
#     whose only agent is the bridge, so the suite calls the upstream's tools
#     by their bare names;
#   - per revision, runs the suite directly (results/conformance/mcpgo-direct/
#     <rev>/), then starts a bridge that asks the upstream for that same
#     revision (--upstream-protocol <rev>, as the suite does directly; the
#     bridge is one client of the upstream, at one version) and runs the suite
#     through the gateway (results/conformance/mcpgo-bridge/<rev>/), with the
#     scenario selection and options of the run above;
#   - prints per revision `conformance <rev> mcp-go: direct N/M, through
#     toolbus+bridge K/M scored` (the two full runs) and each scored scenario
#     that passes directly but fails through the bridge, with its failed checks;
#   - fails on such a scenario unless conformance/expected-failures-bridge.yaml
#     lists it (a listed one that passes is reported only). A scenario that
#     fails directly is never held against the bridge. mcp-go itself drops a
#     call's last notification now and then (tools-call-with-progress,
#     tools-call-with-logging), so such a scenario first runs again on its own
#     directly, up to CONFORMANCE_BRIDGE_RETRIES (default 10) times: failing
#     there with the very same failed checks and messages makes it the
#     upstream's flake, reported and not failed. It then runs through the
#     bridge on its own (up to 3 times) to tell whether the failure depends on
#     what ran before it. The bridge's logs are logs/bridge-<n>.log.
#
# Environment: CONFORMANCE_REVISIONS (default "2025-11-25 2026-07-28"),
# CONFORMANCE_TIMEOUT_MS (per scenario, default 30000),
# CONFORMANCE_CALL_TIMEOUT (the gateway's --call-timeout, default 20s),
# CONFORMANCE_BRIDGE (0: skip the mcp-go runs), CONFORMANCE_BRIDGE_RETRIES,
# CONFORMANCE_BRIDGE_UPSTREAM_PROTOCOL (the bridge's --upstream-protocol for
# every revision instead of the revision under test; "newest": its default).
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

# start_gateway SUFFIX AGENT makes a store in $work/data$SUFFIX with the
# expert-agent identity AGENT and a token, and runs `toolbus serve` on it
# (its log: $LOGS/gateway$SUFFIX.log). It sets gw_agent_password, gw_token,
# gw_http and gw_mqtt (host:port), or says why not and returns 1.
start_gateway() {
  local data=$work/data$1 out=$work/gateway$1 line
  bin/toolbus init --data-dir "$data" >/dev/null || { say "toolbus init failed"; return 1; }
  bin/toolbus mqtt-user add --data-dir "$data" --username "$2" --role expert-agent \
    --generate-password >"$out.agent" 2>&1 || { cat "$out.agent" >&2; say "mqtt-user add failed"; return 1; }
  gw_agent_password=$(tail -n 1 "$out.agent")
  bin/toolbus token create --data-dir "$data" --user conformance --name "make conformance$1" --ttl 2h \
    >"$out.token" 2>&1 || { cat "$out.token" >&2; say "token create failed"; return 1; }
  gw_token=$(tail -n 1 "$out.token")
  bin/toolbus serve --data-dir "$data" --http-addr 127.0.0.1:0 --mqtt-addr 127.0.0.1:0 \
    --call-timeout "$CALL_TIMEOUT" --log-level info >"$out.serve" 2>"$LOGS/gateway$1.log" &
  pids+=($!)
  line=$(wait_for_line "$out.serve" 'mqtt://' "${pids[-1]}") ||
    { tail -n 20 "$LOGS/gateway$1.log" >&2; say "toolbus serve did not start"; return 1; }
  gw_http=$(sed -E 's|.*http://([^/ ]+)/.*|\1|' <<<"$line")
  gw_mqtt=$(sed -E 's|.*mqtt://([^ ]+).*|\1|' <<<"$line")
}

# start_proxy SUFFIX TOKEN GATEWAY runs conformance-proxy in front of the
# gateway at GATEWAY (host:port), adding TOKEN (its log:
# $LOGS/proxy$SUFFIX.log), and sets proxy_url, or says why not and returns 1.
start_proxy() {
  local out=$work/proxy$1.out line
  TOOLBUS_PROXY_TOKEN=$2 bin/conformance-proxy --target "http://$3" >"$out" 2>"$LOGS/proxy$1.log" &
  pids+=($!)
  line=$(wait_for_line "$out" '^conformance-proxy: ' "${pids[-1]}") ||
    { tail -n 20 "$LOGS/proxy$1.log" >&2; say "conformance-proxy did not start"; return 1; }
  proxy_url="http://localhost:$(sed -E 's|^conformance-proxy: http://[^ ]*:([0-9]+) .*|\1|' <<<"$line")/api/v1/mcp"
}

start_gateway "" conformance-agent || die "the gateway did not start"
agent_password=$gw_agent_password token=$gw_token gateway=$gw_http mqtt=$gw_mqtt

TOOLBUS_AGENT_PASSWORD=$agent_password bin/conformance-agent --broker-url "tcp://$mqtt" \
  --username conformance-agent >"$LOGS/agent.out" 2>"$LOGS/agent.log" &
pids+=($!)
agent_pid=${pids[-1]}

start_proxy "" "$token" "$gateway" || die "the proxy did not start"
url=$proxy_url

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

# --- mcp-go, directly and through toolbus + bridge --------------------------------
BRIDGE=${CONFORMANCE_BRIDGE:-1}
BRIDGE_RETRIES=${CONFORMANCE_BRIDGE_RETRIES:-10}
BRIDGE_PROTOCOL=${CONFORMANCE_BRIDGE_UPSTREAM_PROTOCOL:-}
BRIDGE_EXPECTED=conformance/expected-failures-bridge.yaml
SUITE_BOUND=1800 # seconds, a whole revision; a single scenario gets TIMEOUT_MS + 30 s
bstatus=0

# The result lines last: not scored first, then one scored line per revision,
# then the mcp-go lines.
print_results() {
  local line rev
  for line in 2 1; do
    for rev in $REVISIONS; do
      if [[ -f $RESULTS/$rev/summary.txt ]]; then sed -n "${line}p" "$RESULTS/$rev/summary.txt"; fi
    done
  done
  for rev in $REVISIONS; do
    if [[ -f $RESULTS/mcpgo-bridge/$rev/compare.txt ]]; then cat "$RESULTS/mcpgo-bridge/$rev/compare.txt"; fi
  done
}
# bdie reports a harness failure of the mcp-go part, after the results so far.
bdie() {
  say "mcp-go: $*"
  print_results
  exit 2
}

# free_port prints a loopback TCP port that was free a moment ago.
free_port() {
  "$NODE" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# start_upstream LOG starts bin/mcpgo-conformance on a free loopback port and
# sets up_port once GET /health answers (10 s), trying three ports.
start_upstream() {
  local port pid
  for _ in 1 2 3; do
    port=$(free_port) || return 1
    CONFORMANCE_ADDR=127.0.0.1:$port bin/mcpgo-conformance >>"$LOGS/$1.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      if curl --noproxy '*' -fsS --max-time 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1 && kill -0 "$pid" 2>/dev/null; then
        up_port=$port
        return 0
      fi
      sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
  done
  return 1
}

# bridge_ready URL CLIENTID: through the proxy at URL, platform_agents shows
# exactly one agent online, mcpgo as instance CLIENTID, serving test_simple_text.
bridge_ready() {
  "$NODE" -e '
    const [url, clientId] = process.argv.slice(1);
    const v = "2026-07-28";
    fetch(url, {
      method: "POST", signal: AbortSignal.timeout(5000),
      headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        "MCP-Protocol-Version": v, "Mcp-Method": "tools/call", "Mcp-Name": "platform_agents" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "platform_agents", arguments: {},
        _meta: { "io.modelcontextprotocol/protocolVersion": v, "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": { name: "conformance.sh", version: "1" } } } }),
    }).then((r) => r.text()).then((t) => {
      const m = JSON.parse(t.startsWith("{") ? t : t.split("\n").find((l) => l.startsWith("data:")).slice(5));
      const s = JSON.parse(m.result.content[0].text);
      const online = s.agents.filter((a) => a.online);
      const ok = online.length === 1 && online[0].agent === "mcpgo" && online[0].clientId === clientId &&
        s.tools.some((x) => x.name === "test_simple_text" && x.agent === "mcpgo");
      process.exit(ok ? 0 : 1);
    }).catch(() => process.exit(1));' "$1" "$2"
}

# start_bridge PROTOCOL TAG starts `expert-agent bridge` (instance mcpgo-TAG)
# in front of the upstream, asking it for PROTOCOL ("newest": the bridge's
# default), and waits (30 s) until the gateway routes to it alone.
start_bridge() {
  local proto=() log=$LOGS/bridge-$2.log
  [[ $1 == newest ]] || proto=(--upstream-protocol "$1")
  TOOLBUS_AGENT_PASSWORD=$bridge_password bin/expert-agent bridge --broker-url "tcp://$bmqtt" --username mcpgo \
    --client-id "mcpgo-$2" "${proto[@]}" --upstream-url "http://127.0.0.1:$bport/mcp" >"$log" 2>&1 &
  bridge_pid=$!
  pids+=("$bridge_pid")
  for _ in $(seq 1 150); do
    kill -0 "$bridge_pid" 2>/dev/null || { tail -n 20 "$log" >&2; bdie "expert-agent bridge exited"; }
    if bridge_ready "$burl" "mcpgo-$2"; then return 0; fi
    sleep 0.2
  done
  tail -n 20 "$LOGS/gateway-bridge.log" "$log" "$LOGS/proxy-bridge.log" >&2
  bdie "the gateway did not route to bridge mcpgo-$2 within 30 s"
}

# stop_bridge stops the running bridge (SIGTERM; SIGKILL after 15 s).
stop_bridge() {
  local p rest=()
  kill -TERM "$bridge_pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$bridge_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$bridge_pid" 2>/dev/null || true
  wait "$bridge_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [[ $p == "$bridge_pid" ]] || rest+=("$p"); done
  pids=("${rest[@]}")
  bridge_pid=
}

# run_suite URL OUT BOUND ARGS... runs the suite into OUT (log: OUT/suite.log)
# for at most BOUND seconds and sets suite_rc (124: it ran out of time).
run_suite() {
  local url=$1 out=$2 bound=$3
  shift 3
  mkdir -p "$out"
  timeout -k 10 "$bound" "$NODE" "$SUITE/dist/index.js" server --url "$url" --timeout "$TIMEOUT_MS" -o "$out" "$@" \
    >"$out/suite.log" 2>&1 &
  suite_pid=$!
  suite_rc=0
  wait "$suite_pid" || suite_rc=$?
  suite_pid=
}

# score_run DIR REV scores a full run (summary.json; its report in DIR/report.txt).
score_run() {
  local rc=0
  case $suite_rc in 124 | 137) bdie "the suite ran out of time ($SUITE_BOUND s) in $1; see $1/suite.log" ;; esac
  "$NODE" scripts/conformance-report.mjs --revision "$2" --results "$1" --suite-dir "$SUITE" --suite-exit "$suite_rc" \
    >"$1/report.txt" 2>&1 || rc=$?
  [[ $rc -le 1 ]] || { cat "$1/report.txt" >&2; bdie "could not score $1"; }
}

bridge_run() {
  local bridge_password btoken bport dport bgateway bmqtt burl durl
  local rev proto n=0 d b s i rc candidates single_bound=$((TIMEOUT_MS / 1000 + 30)) start=$SECONDS
  bridge_pid=
  go build -o bin/ ./cmd/expert-agent || bdie "building cmd/expert-agent failed"
  go build -o bin/mcpgo-conformance github.com/mark3labs/mcp-go/examples/conformance ||
    bdie "building github.com/mark3labs/mcp-go/examples/conformance failed"

  # Two upstreams: one for the direct runs, one behind the bridge.
  start_upstream mcpgo-direct || { tail -n 20 "$LOGS/mcpgo-direct.log" >&2; bdie "mcp-go (direct) did not start"; }
  dport=$up_port
  start_upstream mcpgo-bridged || { tail -n 20 "$LOGS/mcpgo-bridged.log" >&2; bdie "mcp-go (behind the bridge) did not start"; }
  bport=$up_port
  durl="http://localhost:$dport/mcp"

  # A second gateway, whose only agent is the bridge.
  start_gateway -bridge mcpgo || bdie "the second gateway did not start"
  bridge_password=$gw_agent_password btoken=$gw_token bgateway=$gw_http bmqtt=$gw_mqtt
  start_proxy -bridge "$btoken" "$bgateway" || bdie "the second proxy did not start"
  burl=$proxy_url
  say "mcp-go directly: $durl; through the bridge: gateway http://$bgateway, broker mqtt://$bmqtt, upstream http://127.0.0.1:$bport/mcp, suite -> $burl"

  for rev in $REVISIONS; do
    d=$RESULTS/mcpgo-direct/$rev
    b=$RESULTS/mcpgo-bridge/$rev
    say "running $rev against mcp-go directly (suite log: $d/suite.log)"
    run_suite "$durl" "$d" "$SUITE_BOUND" --requirements "$rev"
    score_run "$d" "$rev"

    # The bridge asks the upstream for the revision under test, as the suite
    # does directly (the bridge is one client of the upstream, at one version).
    proto=${BRIDGE_PROTOCOL:-$rev}
    n=$((n + 1))
    start_bridge "$proto" "$n"
    say "running $rev against mcp-go through toolbus+bridge (upstream protocol $proto; suite log: $b/suite.log; bridge log: $LOGS/bridge-$n.log)"
    run_suite "$burl" "$b" "$SUITE_BOUND" --requirements "$rev"
    score_run "$b" "$rev"

    # Each scenario that passes directly but fails through the bridge runs
    # again on its own: directly until it fails (does the upstream fail it
    # the same way by itself?), then through the bridge until it passes.
    candidates=$("$NODE" scripts/conformance-report.mjs --bridge candidates --revision "$rev" --suite-dir "$SUITE" \
      --direct "$d" --bridged "$b" --expected "$BRIDGE_EXPECTED") || bdie "could not compare $d and $b"
    for s in $candidates; do
      say "$rev: $s passes directly but fails through the bridge; running it again on its own"
      for i in $(seq 1 "$BRIDGE_RETRIES"); do
        run_suite "$durl" "$b/retries/$s/direct-$i" "$single_bound" --scenario "$s" --spec-version "$rev" --force
        [[ $suite_rc == 0 ]] || break
      done
      for i in 1 2 3; do
        run_suite "$burl" "$b/retries/$s/bridge-$i" "$single_bound" --scenario "$s" --spec-version "$rev" --force
        [[ $suite_rc != 0 ]] || break
      done
    done
    stop_bridge

    rc=0
    "$NODE" scripts/conformance-report.mjs --bridge verdict --revision "$rev" --suite-dir "$SUITE" \
      --direct "$d" --bridged "$b" --expected "$BRIDGE_EXPECTED" || rc=$?
    case $rc in
    0) ;;
    1) bstatus=1 ;;
    *) bdie "could not compare $d and $b" ;;
    esac
  done
  say "the mcp-go part took $((SECONDS - start)) s"
}

if [[ $BRIDGE != 0 ]]; then
  bridge_run
  case $bstatus in
  0) say "every scored scenario that passes mcp-go directly passes through toolbus+bridge (or is the upstream's flake, or listed in $BRIDGE_EXPECTED)" ;;
  *) say "a scored scenario passes mcp-go directly but fails through toolbus+bridge: see above and $RESULTS/mcpgo-bridge/<rev>/" ;;
  esac
fi

print_results
[[ $status == 2 || $bstatus == 0 ]] || status=$bstatus
exit "$status"
