#!/usr/bin/env bash
# Measures toolbus beside the MCP servers a user would run instead, in one
# run on this machine: the four baselines (bare net/http, mcp-go, go-sdk
# stateful and stateless) serving a trivial echo tool, and the gateway
# serving the same tool as a platform tool (platform_echo) and as an
# expert-agent tool over the embedded broker (echo). Prints a table with
# ratios against mcp-go and writes JSON under results/.
#
#   scripts/bench.sh                    # 10 s per scenario, 3 interleaved rounds
#   BENCH_DURATION=3s BENCH_ROUNDS=1 scripts/bench.sh
#   BENCH_PPROF=1 scripts/bench.sh      # also saves a CPU profile of the gateway (results/gateway.cpu.pprof)
#   BENCH_AGENT_PPROF=1 scripts/bench.sh # also saves one of the expert agent (results/agent.cpu.pprof)
#   (both start BENCH_PPROF_DELAY seconds into the run, default 2, and last BENCH_PPROF_SECONDS, default 5)
#   BENCH_AGENT_GOMAXPROCS=1 scripts/bench.sh  # runs the expert agent with GOMAXPROCS=1
# Extra arguments go to toolbus-bench (e.g. --payload 1024 --protocol-version 2026-07-28).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-10s}
ROUNDS=${BENCH_ROUNDS:-3}
SESSIONS=${BENCH_SESSIONS:-32}
mkdir -p results bin
go build -o bin/ ./cmd/toolbus ./cmd/expert-agent ./cmd/toolbus-bench

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

./bin/toolbus mqtt-user add --data-dir "$work" --username bench-agent --role expert-agent --generate-password \
  | tail -n 1 > "$work/agent.pw"
TOKEN=$(./bin/toolbus token create --data-dir "$work" --user bench --ttl 2h | tail -n 1)

pprof_args=()
[[ -n ${BENCH_PPROF:-} ]] && pprof_args=(--pprof-addr 127.0.0.1:0)
./bin/toolbus serve --data-dir "$work" --http-addr 127.0.0.1:0 --mqtt-addr 127.0.0.1:0 \
  --log-level info "${pprof_args[@]}" > "$work/serve.out" 2> "$work/serve.err" &
gw=$!
pids+=("$gw")
for _ in $(seq 1 200); do grep -q 'mqtt://' "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
line=$(grep 'mqtt://' "$work/serve.out") || { cat "$work/serve.err" >&2; exit 1; }
URL=$(sed -E 's|.*(http://[^ ]+).*|\1|' <<<"$line")
MQTT=$(sed -E 's|.*mqtt://([^ ]+).*|\1|' <<<"$line")

# The agent logs its pprof address at info level; it logs nothing per call at
# info, so the higher level costs nothing while measuring.
agent_args=(--log-level warn)
[[ -n ${BENCH_AGENT_PPROF:-} ]] && agent_args=(--log-level info --pprof-addr 127.0.0.1:0)
agent_env=()
[[ -n ${BENCH_AGENT_GOMAXPROCS:-} ]] && agent_env=("GOMAXPROCS=$BENCH_AGENT_GOMAXPROCS")
env "${agent_env[@]}" TOOLBUS_AGENT_PASSWORD="$(cat "$work/agent.pw")" ./bin/expert-agent --broker-url "tcp://$MQTT" \
  --username bench-agent "${agent_args[@]}" 2> "$work/agent.err" &
agent=$!
pids+=("$agent")
sleep 1

if [[ -n ${BENCH_PPROF:-} ]]; then
  paddr=$(grep -o '"addr":"[^"]*"' "$work/serve.err" | head -n1 | cut -d'"' -f4)
  (sleep "${BENCH_PPROF_DELAY:-2}"; curl -s "http://$paddr/debug/pprof/profile?seconds=${BENCH_PPROF_SECONDS:-5}" -o results/gateway.cpu.pprof) &
fi
if [[ -n ${BENCH_AGENT_PPROF:-} ]]; then
  aaddr=$(grep '"component":"pprof"' "$work/agent.err" | grep -o '"addr":"[^"]*"' | head -n1 | cut -d'"' -f4)
  [[ -n $aaddr ]] || { echo "bench.sh: the agent logged no pprof address" >&2; cat "$work/agent.err" >&2; exit 1; }
  (sleep "${BENCH_PPROF_DELAY:-2}"; curl -s "http://$aaddr/debug/pprof/profile?seconds=${BENCH_PPROF_SECONDS:-5}" -o results/agent.cpu.pprof) &
fi

TOOLBUS_BENCH_TOKEN=$TOKEN ./bin/toolbus-bench --scenario baselines,target --target "$URL" --target-pid "$gw,$agent" \
  --tool platform_echo,echo --sessions "$SESSIONS" --duration "$DURATION" --rounds "$ROUNDS" "$@"
