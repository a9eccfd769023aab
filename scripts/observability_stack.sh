#!/usr/bin/env bash
# A local observability stack on 127.0.0.1, each part from its own registry package:
#
#   rotel       OTLP collector (PyPI `rotel`)      gRPC :4317, HTTP :4318  -> Phoenix
#   Phoenix     traces UI (PyPI `arize-phoenix`)   UI and OTLP/HTTP :6006 (its gRPC on :4319)
#   Prometheus  metrics (Debian `prometheus`)      UI and API :9090, scrapes :9464-9471/metrics
#
# Runs send spans to rotel, which batches and retries (every 1-5 s, for ROTEL_RETRY_FOR: 300s), so
# a restarting Phoenix loses nothing; every exporting process serves its metrics on the first free
# port from 9464 for Prometheus.
#
#   bash scripts/observability_stack.sh install   # the stack's venv (.stack/venv); ~850 MB, minutes
#   bash scripts/observability_stack.sh up        # install if needed, start, print the settings
#   bash scripts/observability_stack.sh status
#   bash scripts/observability_stack.sh restart phoenix  # same ports and data: earlier traces stay
#   bash scripts/observability_stack.sh down      # stop what `up` started (its pid files)
#
# Phoenix has its own venv because it pins its own OpenTelemetry and web stack. Ports and the
# folders are environment variables: STACK_DIR, STACK_VENV, PHOENIX_PORT, PHOENIX_GRPC_PORT, ROTEL_GRPC_PORT,
# ROTEL_HTTP_PORT, PROMETHEUS_PORT, METRICS_PORT (the first of METRICS_PORTS ports), ROTEL_RETRY_FOR.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK_DIR=$(mkdir -p "${STACK_DIR:-.stack}" && cd "${STACK_DIR:-.stack}" && pwd)
PHOENIX_PORT=${PHOENIX_PORT:-6006}
PHOENIX_GRPC_PORT=${PHOENIX_GRPC_PORT:-4319}
ROTEL_GRPC_PORT=${ROTEL_GRPC_PORT:-4317}
ROTEL_HTTP_PORT=${ROTEL_HTTP_PORT:-4318}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090}
METRICS_PORT=${METRICS_PORT:-9464}
METRICS_PORTS=${METRICS_PORTS:-8}
ROTEL_RETRY_FOR=${ROTEL_RETRY_FOR:-300s}
VENV=${STACK_VENV:-$STACK_DIR/venv}
PHOENIX_SPEC=${PHOENIX_SPEC:-arize-phoenix>=12}

say() { echo "stack: $*"; }
die() { echo "stack: error: $*" >&2; exit 2; }

install() {
  if [ ! -x "$VENV/bin/phoenix" ] || [ ! -x "$VENV/bin/python" ] ||
     ! "$VENV/bin/python" -c 'import rotel, phoenix.client' 2>/dev/null; then
    say "installing Phoenix and rotel into $VENV (once; a few minutes)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PHOENIX_SPEC" rotel
  fi
  if ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing Debian's prometheus"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    else
      die "prometheus is not installed: run 'sudo apt-get install prometheus' (or put it on PATH)"
    fi
  fi
}

rotel_agent() { "$VENV/bin/python" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))'; }

running() { [ -f "$STACK_DIR/$1.pid" ] && kill -0 "$(cat "$STACK_DIR/$1.pid")" 2>/dev/null; }

wait_http() {  # name url seconds
  local deadline=$((SECONDS + $3))
  until python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$2" 2>/dev/null; do
    running "$1" || die "$1 exited while starting; see $STACK_DIR/$1.log"
    [ $SECONDS -lt $deadline ] || die "$1 not ready at $2 after $3 s; see $STACK_DIR/$1.log"
    sleep 0.5
  done
}

start() {  # name command...
  local name=$1; shift
  if running "$name"; then say "$name already running (pid $(cat "$STACK_DIR/$name.pid"))"; return; fi
  nohup "$@" >"$STACK_DIR/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/$name.pid"
}

prometheus_config() {
  local targets="" port
  for ((port = METRICS_PORT; port < METRICS_PORT + METRICS_PORTS; port++)); do
    targets+="'127.0.0.1:$port', "
  done
  cat >"$STACK_DIR/prometheus.yml" <<EOF
# Written by scripts/observability_stack.sh: every process of a run serves /metrics on the first
# free port from $METRICS_PORT (telemetry.exporter includes prometheus).
global:
  scrape_interval: 2s
scrape_configs:
  - job_name: nemo-rl
    static_configs:
      - targets: [${targets%, }]
EOF
}

start_phoenix() {
  mkdir -p "$STACK_DIR/phoenix"
  start phoenix env PHOENIX_WORKING_DIR="$STACK_DIR/phoenix" PHOENIX_HOST=127.0.0.1 \
    PHOENIX_PORT="$PHOENIX_PORT" PHOENIX_GRPC_PORT="$PHOENIX_GRPC_PORT" \
    PHOENIX_TELEMETRY_ENABLED=false "$VENV/bin/phoenix" serve
}

start_prometheus() {
  mkdir -p "$STACK_DIR/prometheus-data"
  prometheus_config
  start prometheus prometheus --config.file="$STACK_DIR/prometheus.yml" \
    --storage.tsdb.path="$STACK_DIR/prometheus-data" \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT"
}

# rotel's own retry defaults (first retry after 5 s, then up to 30 s apart) would leave a
# restarted Phoenix empty for up to half a minute; retry every 1-5 s instead, for ROTEL_RETRY_FOR.
start_rotel() {
  start rotel "$(rotel_agent)" start \
    --otlp-grpc-endpoint "127.0.0.1:$ROTEL_GRPC_PORT" \
    --otlp-http-endpoint "127.0.0.1:$ROTEL_HTTP_PORT" \
    --exporter otlp --otlp-exporter-protocol http \
    --otlp-exporter-endpoint "http://127.0.0.1:$PHOENIX_PORT" \
    --otlp-exporter-retry-initial-backoff 1s --otlp-exporter-retry-max-backoff 5s \
    --otlp-exporter-retry-max-elapsed-time "$ROTEL_RETRY_FOR" \
    --batch-timeout 200ms
}

wait_phoenix() { wait_http phoenix "http://127.0.0.1:$PHOENIX_PORT/healthz" 240; }
wait_prometheus() { wait_http prometheus "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" 60; }

wait_rotel() {
  local deadline=$((SECONDS + 20))
  until python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$ROTEL_GRPC_PORT" 2>/dev/null; do
    running rotel || die "rotel exited while starting; see $STACK_DIR/rotel.log"
    [ $SECONDS -lt $deadline ] || die "rotel not listening on $ROTEL_GRPC_PORT; see $STACK_DIR/rotel.log"
    sleep 0.2
  done
}

up() {
  install
  start_phoenix
  start_prometheus
  start_rotel
  wait_prometheus
  wait_phoenix
  wait_rotel
  cat <<EOF
stack: up (logs and pid files in $STACK_DIR)
  Phoenix     http://127.0.0.1:$PHOENIX_PORT       traces, one project per run
  Prometheus  http://127.0.0.1:$PROMETHEUS_PORT       metrics, e.g. rl_train_loss
  rotel       127.0.0.1:$ROTEL_GRPC_PORT (gRPC), :$ROTEL_HTTP_PORT (HTTP)   in front of Phoenix
Send a run's telemetry here with these settings (env, or the same keys in the telemetry: block):
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$ROTEL_GRPC_PORT
  export NEMO_RL_OTEL_EXPORTER=otlp,prometheus,file
  export NEMO_RL_OTEL_PROMETHEUS_PORT=$METRICS_PORT
  python examples/run_grpo.py telemetry.project=my_run
EOF
}

stop() {  # name: SIGTERM, SIGKILL after 10 s; forgets its pid file
  local name=$1 pid
  [ -f "$STACK_DIR/$name.pid" ] || return 0
  pid=$(cat "$STACK_DIR/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    say "stopped $name (pid $pid)"
  fi
  rm -f "$STACK_DIR/$name.pid"
}

down() {
  local name
  for name in rotel prometheus phoenix; do  # rotel first: it flushes into Phoenix
    stop "$name"
  done
}

# One part stopped (if it still runs) and started again on the same ports and data folder: Phoenix
# keeps its earlier traces, and what rotel held for it meanwhile arrives once it is back.
restart() {
  case "${1:-}" in
    phoenix | prometheus | rotel) ;;
    *) die "restart takes phoenix, prometheus or rotel (got '${1:-}')" ;;
  esac
  [ -x "$VENV/bin/phoenix" ] || die "no stack venv at $VENV: run '$0 up' first"
  stop "$1"
  "start_$1"
  "wait_$1"
  say "$1 running again (pid $(cat "$STACK_DIR/$1.pid"))"
}

status() {
  local name
  for name in phoenix prometheus rotel; do
    if running "$name"; then say "$name running (pid $(cat "$STACK_DIR/$name.pid"))"; else say "$name stopped"; fi
  done
}

case "${1:-}" in
  install) install ;;
  up) up ;;
  down) down ;;
  restart) restart "${2:-}" ;;
  status) status ;;
  *) echo "usage: $0 install|up|down|status|restart phoenix|prometheus|rotel" >&2; exit 2 ;;
esac
