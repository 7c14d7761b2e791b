#!/usr/bin/env bash
# Starts a working toolbus demo on this machine: the gateway with its embedded
# broker, and two expert agents connected to it (the reference agent's
# binary twice, each serving some of its tools under its own name). Ctrl-C
# stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR=${TOOLBUS_DATA_DIR:-./data}
HTTP_ADDR=${TOOLBUS_HTTP_ADDR:-127.0.0.1:8080}
MQTT_ADDR=${TOOLBUS_MQTT_ADDR:-127.0.0.1:1883}
BIN=${TOOLBUS_BIN_DIR:-./bin}

# A second `make run` would find the ports taken, and meanwhile reset the
# demo agents' passwords under the running ones: refuse first, touch nothing.
for addr in "$HTTP_ADDR" "$MQTT_ADDR"; do
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    echo "make run: something listens on $addr already (another make run?): stop it, or set TOOLBUS_HTTP_ADDR and TOOLBUS_MQTT_ADDR" >&2
    exit 1
  fi
done
# Two agents, by name (their MQTT usernames), and the tools each serves.
declare -A AGENT_TOOLS=([demo-text]=echo,word_count,sha256 [demo-clock]=countdown,time_now)

"$BIN/toolbus" init --data-dir "$DATA_DIR" >/dev/null
# A fresh password for each demo agent on every start: the old ones are not kept anywhere.
declare -A AGENT_PASSWORD
for agent in "${!AGENT_TOOLS[@]}"; do
  "$BIN/toolbus" mqtt-user remove --data-dir "$DATA_DIR" --username "$agent" >/dev/null 2>&1 || true
  AGENT_PASSWORD[$agent]=$("$BIN/toolbus" mqtt-user add --data-dir "$DATA_DIR" --username "$agent" \
    --role expert-agent --generate-password | tail -n 1)
done

# The user who signs in from OAuth clients (those that take only the URL)
# and to the console: a fresh password on every start too.
SIGNIN_PASSWORD=$("$BIN/toolbus" user passwd --data-dir "$DATA_DIR" --user demo --generate-password 2>/dev/null | tail -n 1) ||
  SIGNIN_PASSWORD=$("$BIN/toolbus" user add --data-dir "$DATA_DIR" --user demo --generate-password | tail -n 1)
# ... and the operator who signs in to the console (the admin role).
"$BIN/toolbus" user admin demo on --data-dir "$DATA_DIR" >/dev/null

TOKEN=$("$BIN/toolbus" token create --data-dir "$DATA_DIR" --user demo --name "make run" --ttl 24h | tail -n 1)

pids=()   # the server first, then the agents
# Ctrl-C: the agents stop first (they say offline while the broker is up),
# then the server; quietly, and the demo ends with 0.
cleanup() {
  trap - EXIT INT TERM
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM
# Ctrl-C signals the terminal's whole foreground process group. The
# gateway and the agents would all get it at once (a Go program handles
# SIGINT even where the shell set it to be ignored), the agents then
# losing their broker as they stop; each in a process group of its own,
# they stop when cleanup says, in its order.
set -m

"$BIN/toolbus" serve --data-dir "$DATA_DIR" --http-addr "$HTTP_ADDR" --mqtt-addr "$MQTT_ADDR" --log-format text &
pids+=($!)

for _ in $(seq 1 100); do
  curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://$HTTP_ADDR/readyz" >/dev/null || { echo "toolbus did not become ready" >&2; exit 1; }

for agent in "${!AGENT_TOOLS[@]}"; do
  TOOLBUS_AGENT_PASSWORD="${AGENT_PASSWORD[$agent]}" "$BIN/expert-agent" --broker-url "tcp://$MQTT_ADDR" \
    --username "$agent" --tools "${AGENT_TOOLS[$agent]}" --log-format text &
  pids+=($!)
done

URL="http://$HTTP_ADDR/api/v1/mcp"
CONSOLE_URL="http://$HTTP_ADDR/console/"
cat <<MSG

toolbus is running: platform tools and two expert agents' tools on one MCP endpoint.

  Console: $CONSOLE_URL   (sign in: user demo, password $SIGNIN_PASSWORD)

  MCP URL: $URL
  token:   $TOKEN   (user "demo", valid 24 h)

  Add it to an MCP client, e.g. Claude Code:
    claude mcp add --transport http toolbus $URL --header "Authorization: Bearer $TOKEN"
  Or give a client only the URL: it signs in with OAuth in the browser (docs/oauth.md).
    sign-in: user demo, password $SIGNIN_PASSWORD
  Or look with curl:
    curl -s $URL -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
      -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' \\
      -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
    curl -s http://$HTTP_ADDR/api/v1/whoami -H "Authorization: Bearer $TOKEN"

  MQTT broker: tcp://$MQTT_ADDR (expert agents demo-text: ${AGENT_TOOLS[demo-text]}; demo-clock: ${AGENT_TOOLS[demo-clock]})
Press Ctrl-C to stop.
MSG
wait -n
