#!/usr/bin/env bash
# `make compose-test`: run docker/docker-compose.yml (broker + integration-test runner) on this host
# with rootful podman standing in for the Docker engine, and exit with the runner's status.
# Prepares the host first (docker/prepare-host.sh). Whatever happens, the EXIT trap removes the
# compose containers, network and data volume and stops the two helpers started here, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=${CHRONOLOG_COMPOSE_PROJECT:-chronolog-compose-test}
UP_TIMEOUT=${CHRONOLOG_COMPOSE_TIMEOUT:-1200}
say() { echo "[compose-test] $*"; }

docker/prepare-host.sh

rundir=$(mktemp -d "${TMPDIR:-/tmp}/chronolog-compose.XXXXXX")
sock=$rundir/podman.sock
export DOCKER_HOST=unix://$sock
export CHRONOLOG_DOCKER_SOCKET=$sock
export CHRONOLOG_BASE_IMAGE=${CHRONOLOG_BASE_IMAGE:-localhost/localbase}
compose=(docker-compose --ansi never -p "$PROJECT" -f docker/docker-compose.yml)
service_pid=
health_pid=

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  say "tearing down: compose containers, network and volume; helper PIDs ${health_pid:-none} ${service_pid:-none}"
  if [ -n "$service_pid" ]; then
    "${compose[@]}" down --volumes --remove-orphans -t 0 >"$rundir/down.log" 2>&1 \
      || { say "docker-compose down failed:"; cat "$rundir/down.log"; }
  fi
  for pid in $health_pid $service_pid; do
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
podman system service --time=0 "unix://$sock" 2>"$rundir/service.log" &
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

say "running broker and test-runner (docker-compose up, limit ${UP_TIMEOUT} s)"
start=$SECONDS
set +e
timeout "$UP_TIMEOUT" "${compose[@]}" up --no-build --abort-on-container-exit --exit-code-from test-runner
status=$?
set -e
if [ "$status" = 124 ]; then
  say "ERROR: docker-compose up did not finish within $UP_TIMEOUT s"
fi
say "test-runner exited with status $status after $((SECONDS - start)) s"
exit "$status"
