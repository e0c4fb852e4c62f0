#!/usr/bin/env bash
# `make compose-test`: run docker/docker-compose.yml (broker + integration-test runner) on this host
# with rootful podman standing in for the Docker engine, and exit with the runner's status.
# CHRONOLOG_COMPOSE_FILE / CHRONOLOG_COMPOSE_RUNNER pick another compose file and its runner
# service (the Makefile runs docker/docker-compose.cluster.yml's cluster-test-runner too).
# Prepares the host first (docker/prepare-host.sh). Whatever happens, the EXIT trap removes the
# compose containers, network and data volume and stops the two helpers started here, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=${CHRONOLOG_COMPOSE_PROJECT:-chronolog-compose-test}
COMPOSE_FILE=${CHRONOLOG_COMPOSE_FILE:-docker/docker-compose.yml}
RUNNER=${CHRONOLOG_COMPOSE_RUNNER:-test-runner}
RUN_TIMEOUT=${CHRONOLOG_COMPOSE_TIMEOUT:-900}
say() { echo "[compose-test] $*"; }

docker/prepare-host.sh

rundir=$(mktemp -d "${TMPDIR:-/tmp}/chronolog-compose.XXXXXX")
sock=$rundir/podman.sock
export DOCKER_HOST=unix://$sock
export CHRONOLOG_DOCKER_SOCKET=$sock
export CHRONOLOG_BASE_IMAGE=${CHRONOLOG_BASE_IMAGE:-localhost/localbase}
# Build through the API (docker-py), so no docker CLI is needed on the host.
export COMPOSE_DOCKER_CLI_BUILD=0
compose=(docker-compose --ansi never -p "$PROJECT" -f "$COMPOSE_FILE")
service_pid=
health_pid=
logs_pid=

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  say "tearing down: compose containers, network and volume; helper PIDs ${logs_pid:-} ${health_pid:-} ${service_pid:-}"
  if [ -n "$service_pid" ]; then
    "${compose[@]}" down --volumes --remove-orphans -t 0 >"$rundir/down.log" 2>&1 \
      || { say "docker-compose down failed:"; cat "$rundir/down.log"; }
  fi
  for pid in $logs_pid $health_pid $service_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$rundir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting the Docker API (podman system service) on $sock"
# Own session: a Ctrl-C in the terminal must not take the API away before the teardown ran.
setsid podman system service --time=0 "unix://$sock" 2>"$rundir/service.log" &
service_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { say "ERROR: podman system service did not open $sock:"; cat "$rundir/service.log"; exit 2; }

# Without systemd podman never runs healthchecks on its own; depends_on: service_healthy needs them.
say "starting the healthcheck runner loop"
(
  while :; do
    for id in $(podman ps -q --filter "label=com.docker.compose.project=$PROJECT" \
                  --filter health=starting --filter health=unhealthy 2>/dev/null); do
      podman healthcheck run "$id" >/dev/null 2>&1 || true
    done
    sleep 1
  done
) &
health_pid=$!

say "building images (base $CHRONOLOG_BASE_IMAGE)"
start=$SECONDS
if ! "${compose[@]}" build >"$rundir/build.log" 2>&1; then
  cat "$rundir/build.log"
  say "ERROR: image build failed (log above)"
  exit 2
fi
say "images built in $((SECONDS - start)) s"

# Not `up --abort-on-container-exit`: a test stops and starts the broker on purpose, which would
# abort the run. Start both (the runner once the broker is healthy) and wait for the runner.
say "starting $COMPOSE_FILE's services (docker-compose up)"
start=$SECONDS
# Leftovers of an interrupted earlier run (its data volume above all) must not leak into this one.
"${compose[@]}" down --volumes --remove-orphans -t 0 >/dev/null 2>&1 || true
if ! "${compose[@]}" up -d --no-build; then
  "${compose[@]}" logs --no-color --tail=200 || true
  say "ERROR: docker-compose up failed (log above)"
  exit 2
fi
runner=$("${compose[@]}" ps -q "$RUNNER")
"${compose[@]}" logs -f --no-color --no-log-prefix "$RUNNER" &
logs_pid=$!
set +e
status=$(timeout "$RUN_TIMEOUT" podman wait "$runner")
waited=$?
set -e
# `logs -f` ends by itself once the runner has stopped; do not hang on it if it does not.
for _ in $(seq 50); do kill -0 "$logs_pid" 2>/dev/null || break; sleep 0.2; done
kill "$logs_pid" 2>/dev/null || true
wait "$logs_pid" 2>/dev/null || true
if [ "$waited" = 124 ]; then
  say "ERROR: $RUNNER did not finish within $RUN_TIMEOUT s"
  status=124
elif [ "$waited" != 0 ] || ! [[ "$status" =~ ^[0-9]+$ ]]; then
  say "ERROR: podman wait for $RUNNER failed (status $waited, output '$status')"
  status=2
fi
if [ "$status" != 0 ]; then
  say "last 100 lines of every other service's log:"
  for service in $("${compose[@]}" config --services); do
    [ "$service" = "$RUNNER" ] || "${compose[@]}" logs --no-color --tail=100 "$service" || true
  done
fi
say "$RUNNER exited with status $status after $((SECONDS - start)) s"
exit "$status"
