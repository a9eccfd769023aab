#!/usr/bin/env bash
# A local observability stack on 127.0.0.1, each part from its own registry package:
#
#   rotel       OTLP collector (PyPI `rotel`)      gRPC :4317, HTTP :4318; traces -> Phoenix,
#                                                  metrics -> the metrics bridge
#   Phoenix     traces UI (PyPI `arize-phoenix`)   UI and OTLP/HTTP :6006 (its gRPC on :4319)
#   Prometheus  metrics (Debian `prometheus`)      UI, API and remote-write receiver :9090
#   bridge      scripts/metrics_bridge.py          OTLP/HTTP metrics in, remote write out :9201
#
# Each signal goes where it is kept. Spans go to rotel, which batches and retries (every 1-5 s,
# for ROTEL_RETRY_FOR: 300s), so a restarting Phoenix loses nothing. Metrics end in Prometheus
# either way a run sends them: with the settings `up` prints, every exporting process pushes them
# to Prometheus's remote-write receiver itself (the last export at shutdown too; a failed push is
# in the run's own dropped count); sent by OTLP (`exporter: otlp`), rotel routes them to the
# bridge, which pushes them the same way (rotel has no exporter Prometheus 2.42 takes, and
# Prometheus takes OTLP only from 2.47). Either way each series carries the run id, role and
# rank. rotel refuses logs at the door (nothing here keeps them), so a run that sends them is told
# at once and keeps them in its logs.jsonl.
#
#   bash scripts/observability_stack.sh install   # the stack's venv (.stack/venv); ~850 MB, minutes
#   bash scripts/observability_stack.sh up        # install if needed, start, print the settings
#   bash scripts/observability_stack.sh status [RUN_ID]  # what runs; what the stack holds of a run
#   bash scripts/observability_stack.sh restart phoenix  # same ports and data: earlier traces stay
#   bash scripts/observability_stack.sh down      # stop what `up` started (its pid files)
#
# MLflow instead (or as well): a local `mlflow server` on 127.0.0.1 with a SQLite store, which
# takes a run's traces over OTLP/HTTP (/v1/traces) and its logger's params and metrics
# (logger.mlflow). It runs from the project's venv (`pip install -e '.[mlflow]'`):
#
#   bash scripts/observability_stack.sh mlflow up      # start, make the experiment, print settings
#   bash scripts/observability_stack.sh mlflow status
#   bash scripts/observability_stack.sh mlflow down
#
# Phoenix has its own venv because it pins its own OpenTelemetry and web stack. Ports and the
# folders are environment variables: STACK_DIR, STACK_VENV, PHOENIX_PORT, PHOENIX_GRPC_PORT,
# ROTEL_GRPC_PORT, ROTEL_HTTP_PORT, PROMETHEUS_PORT, BRIDGE_PORT, ROTEL_RETRY_FOR; for MLflow
# MLFLOW_PORT (5000), MLFLOW_EXPERIMENT (nemo-rl), MLFLOW_PYTHON (the python with mlflow).
set -euo pipefail
cd "$(dirname "$0")/.."
STACK_DIR=$(mkdir -p "${STACK_DIR:-.stack}" && cd "${STACK_DIR:-.stack}" && pwd)
PHOENIX_PORT=${PHOENIX_PORT:-6006}
PHOENIX_GRPC_PORT=${PHOENIX_GRPC_PORT:-4319}
ROTEL_GRPC_PORT=${ROTEL_GRPC_PORT:-4317}
ROTEL_HTTP_PORT=${ROTEL_HTTP_PORT:-4318}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090}
BRIDGE_PORT=${BRIDGE_PORT:-9201}
ROTEL_RETRY_FOR=${ROTEL_RETRY_FOR:-300s}
VENV=${STACK_VENV:-$STACK_DIR/venv}
PHOENIX_SPEC=${PHOENIX_SPEC:-arize-phoenix>=12}
MLFLOW_PORT=${MLFLOW_PORT:-5000}
MLFLOW_EXPERIMENT=${MLFLOW_EXPERIMENT:-nemo-rl}
MLFLOW_PYTHON=${MLFLOW_PYTHON:-.venv/bin/python}

say() { echo "stack: $*"; }
die() { echo "stack: error: $*" >&2; exit 2; }

install() {
  if [ ! -x "$VENV/bin/phoenix" ] || [ ! -x "$VENV/bin/python" ] ||
     ! "$VENV/bin/python" -c 'import rotel, phoenix.client, cramjam, opentelemetry.exporter.prometheus' 2>/dev/null; then
    say "installing Phoenix, rotel and the bridge's packages into $VENV (once; a few minutes)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    # The bridge (scripts/metrics_bridge.py) uses spanspec's remote write: its two packages.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PHOENIX_SPEC" rotel \
      opentelemetry-exporter-prometheus 'cramjam>=2.8'
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

# Runs and the bridge push metrics (remote write): nothing to scrape, nothing to discover, and
# nothing to stop looking for when a run ends.
prometheus_config() {
  cat >"$STACK_DIR/prometheus.yml" <<EOF
# Written by scripts/observability_stack.sh: runs push their metrics to /api/v1/write
# (telemetry.exporter includes prometheus, telemetry.prometheus_remote_write_url is set).
global:
  scrape_interval: 15s
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
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" \
    --web.enable-remote-write-receiver
}

# The resource attributes the bridge makes labels: nemo_rl's run and lane attributes (its
# registry's conventions), as a pushing process does.
start_bridge() {
  start bridge "$VENV/bin/python" scripts/metrics_bridge.py --listen "127.0.0.1:$BRIDGE_PORT" \
    --remote-write "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/write" \
    --label rl.run_id --label rl.worker.group --label rl.worker.rank
}

# rotel's own retry defaults (first retry after 5 s, then up to 30 s apart) would leave a
# restarted Phoenix empty for up to half a minute; retry every 1-5 s instead, for ROTEL_RETRY_FOR.
start_rotel() {
  start rotel "$(rotel_agent)" start \
    --otlp-grpc-endpoint "127.0.0.1:$ROTEL_GRPC_PORT" \
    --otlp-http-endpoint "127.0.0.1:$ROTEL_HTTP_PORT" \
    --otlp-receiver-logs-disabled \
    --exporter otlp --otlp-exporter-protocol http \
    --otlp-exporter-endpoint "http://127.0.0.1:$PHOENIX_PORT" \
    --otlp-exporter-metrics-endpoint "http://127.0.0.1:$BRIDGE_PORT/v1/metrics" \
    --otlp-exporter-retry-initial-backoff 1s --otlp-exporter-retry-max-backoff 5s \
    --otlp-exporter-retry-max-elapsed-time "$ROTEL_RETRY_FOR" \
    --batch-timeout 200ms
}

wait_phoenix() { wait_http phoenix "http://127.0.0.1:$PHOENIX_PORT/healthz" 240; }
wait_prometheus() { wait_http prometheus "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" 60; }

wait_port() {  # name port seconds
  local deadline=$((SECONDS + $3))
  until python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$2" 2>/dev/null; do
    running "$1" || die "$1 exited while starting; see $STACK_DIR/$1.log"
    [ $SECONDS -lt $deadline ] || die "$1 not listening on $2; see $STACK_DIR/$1.log"
    sleep 0.2
  done
}
wait_bridge() { wait_port bridge "$BRIDGE_PORT" 30; }

wait_rotel() { wait_port rotel "$ROTEL_GRPC_PORT" 20; }

up() {
  install
  start_phoenix
  start_prometheus
  start_bridge
  start_rotel
  wait_prometheus
  wait_phoenix
  wait_bridge
  wait_rotel
  cat <<EOF
stack: up (logs and pid files in $STACK_DIR)
  Phoenix     http://127.0.0.1:$PHOENIX_PORT       traces, one project per run (telemetry.project)
  Prometheus  http://127.0.0.1:$PROMETHEUS_PORT       metrics, pushed by every process of a run
  rotel       127.0.0.1:$ROTEL_GRPC_PORT (gRPC), :$ROTEL_HTTP_PORT (HTTP)   traces into Phoenix, metrics into Prometheus (through the bridge, :$BRIDGE_PORT); refuses logs
Send a run's telemetry here with these settings (env, or the same keys in the telemetry: block):
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$ROTEL_GRPC_PORT
  export NEMO_RL_OTEL_EXPORTER=otlp,prometheus,file
  export NEMO_RL_OTEL_PROMETHEUS_REMOTE_WRITE_URL=http://127.0.0.1:$PROMETHEUS_PORT/api/v1/write
  python examples/run_grpo.py telemetry.project=my_run
Where each signal goes: traces to rotel (then Phoenix) and the run's traces.jsonl; metrics to
Prometheus (every export, the last one at shutdown too) and metrics.jsonl; logs (off unless
telemetry.logs_enabled=true) to logs.jsonl only: rotel refuses them, and the run says so.
With NEMO_RL_OTEL_EXPORTER=otlp instead, metrics go to rotel, which hands them to the bridge,
which pushes them to Prometheus: the same series.
Queries for a GRPO run (its run id is on the run's first lines), in Prometheus's UI:
  rl_policy_loss{rl_run_id="<run id>"}                 the loss, step by step
  rl_reward_mean{rl_run_id="<run id>"}                 the mean reward
  rl_step_duration_seconds_count{rl_run_id="<run id>"} steps done
  histogram_quantile(0.9, rate(rl_step_duration_seconds_bucket[1m]))   slow steps
What the stack holds of one run:  bash $0 status <run id>
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
  for name in rotel bridge prometheus phoenix; do  # rotel first: it flushes into Phoenix and the bridge
    stop "$name"
  done
}

# One part stopped (if it still runs) and started again on the same ports and data folder: Phoenix
# keeps its earlier traces, and what rotel held for it meanwhile arrives once it is back.
restart() {
  case "${1:-}" in
    phoenix | prometheus | rotel | bridge) ;;
    *) die "restart takes phoenix, prometheus, rotel or bridge (got '${1:-}')" ;;
  esac
  [ -x "$VENV/bin/phoenix" ] || die "no stack venv at $VENV: run '$0 up' first"
  stop "$1"
  "start_$1"
  "wait_$1"
  say "$1 running again (pid $(cat "$STACK_DIR/$1.pid"))"
}

status() {  # [run id]: what each part holds of that run
  local name
  for name in phoenix prometheus bridge rotel; do
    if running "$name"; then say "$name running (pid $(cat "$STACK_DIR/$name.pid"))"; else say "$name stopped"; fi
  done
  running prometheus || return 0
  [ -x "$VENV/bin/python" ] || die "no stack venv at $VENV: run '$0 up' first"
  "$VENV/bin/python" scripts/stack_status.py --phoenix "http://127.0.0.1:$PHOENIX_PORT" \
    --prometheus "http://127.0.0.1:$PROMETHEUS_PORT" --rotel-log "$STACK_DIR/rotel.log" \
    --bridge-log "$STACK_DIR/bridge.log" "$@"
}

# -- MLflow: traces over OTLP/HTTP, and the logger's runs ---------------------------------------

mlflow_up() {
  "$MLFLOW_PYTHON" -c 'import mlflow' 2>/dev/null ||
    die "mlflow is not installed in $MLFLOW_PYTHON: pip install -e '.[mlflow]' (or set MLFLOW_PYTHON)"
  mkdir -p "$STACK_DIR/mlflow/artifacts"
  start mlflow "$MLFLOW_PYTHON" -m mlflow server --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
    --backend-store-uri "sqlite:///$STACK_DIR/mlflow/mlflow.db" \
    --default-artifact-root "$STACK_DIR/mlflow/artifacts"
  wait_http mlflow "http://127.0.0.1:$MLFLOW_PORT/health" 180
  local url="http://127.0.0.1:$MLFLOW_PORT" id
  # The experiment the traces go to (the OTLP header names it by id); the logger's runs too.
  id=$(MLFLOW_HTTP_REQUEST_MAX_RETRIES=2 "$MLFLOW_PYTHON" -c 'import sys
from mlflow import MlflowClient
c = MlflowClient(sys.argv[1])
e = c.get_experiment_by_name(sys.argv[2])
print(e.experiment_id if e else c.create_experiment(sys.argv[2]))' "$url" "$MLFLOW_EXPERIMENT") ||
    die "mlflow: cannot make experiment $MLFLOW_EXPERIMENT at $url; see $STACK_DIR/mlflow.log"
  cat <<EOF
stack: mlflow up (pid $(cat "$STACK_DIR/mlflow.pid"), log $STACK_DIR/mlflow.log, store $STACK_DIR/mlflow/mlflow.db)
  MLflow      $url       experiment $MLFLOW_EXPERIMENT (id $id): traces (Traces tab) and runs
Send a run's traces and its logger's params and metrics here (env, then the run's keys):
  export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=$url/v1/traces
  export OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf
  export OTEL_EXPORTER_OTLP_TRACES_HEADERS=x-mlflow-experiment-id=$id
  python examples/run_grpo.py logger.mlflow.enabled=true logger.mlflow.tracking_uri=$url logger.mlflow.experiment=$MLFLOW_EXPERIMENT
With exporter auto (the default) only the traces go to MLflow; metrics and logs, which have no
endpoint of their own, stay in the run's telemetry/metrics.jsonl and logs.jsonl (MLflow takes no
OTLP metrics); the logger's scalars reach MLflow as the run's metrics. The run's id is on the
traces' resource (mlflow.run_id) and the MLflow run's tags hold rl.run_id and the trace file.
EOF
}

mlflow_cmd() {
  case "${1:-}" in
    up) mlflow_up ;;
    down) stop mlflow ;;
    status) if running mlflow; then say "mlflow running (pid $(cat "$STACK_DIR/mlflow.pid")) on 127.0.0.1:$MLFLOW_PORT"; else say "mlflow stopped"; fi ;;
    *) die "mlflow takes up, down or status (got '${1:-}')" ;;
  esac
}

case "${1:-}" in
  install) install ;;
  mlflow) mlflow_cmd "${2:-}" ;;
  up) up ;;
  down) down ;;
  restart) restart "${2:-}" ;;
  status) shift; status "$@" ;;
  *) echo "usage: $0 install|up|down|status [RUN_ID]|restart phoenix|prometheus|rotel|bridge|mlflow up|down|status" >&2; exit 2 ;;
esac
