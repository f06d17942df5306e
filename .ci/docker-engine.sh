#!/usr/bin/env bash
# A Docker engine for the container tests (tests/test_*container*, test_compose.py, test_cluster_containers.py)
# and the images they run. Run by `make test` (the `docker` target) before pytest, and `stop` after it.
#
#   .ci/docker-engine.sh start    an engine that answers: the user's own (DOCKER_HOST or the default
#                                 socket) is kept as it is; else, as root with apt-get, Debian's
#                                 docker.io + docker-compose + debootstrap are installed and a private
#                                 dockerd is started (below); else one line says why the container
#                                 tests will skip (and CI fails in them)
#   .ci/docker-engine.sh host     prints the DOCKER_HOST to give our processes ("" for the default)
#   .ci/docker-engine.sh images   builds the images the tests use, each only when its inputs changed
#   .ci/docker-engine.sh stop     stops the private dockerd, if this checkout started it
#
# The private engine: its own socket, data root, exec root and pidfile under $COMMITLOG_DOCKER_DIR
# (default /var/tmp/commitlog-docker, outside the checkout so a fresh clone in CI finds the images a
# previous run built), never /var/run/docker.sock, and no bridge and no iptables rules: every
# container runs with the host's network, so each connection stays on 127.0.0.1. DOCKER_HOST is
# passed to our processes only (the Makefile gives it to pytest); nothing else on the machine sees it.
#
# The client: Debian's engine is Docker 20.10 (API 1.41); a newer `docker` client earlier on PATH
# (e.g. a Docker 28 client in /usr/local/bin) refuses it, so `docker_cli` prefers /usr/bin/docker and
# pins DOCKER_API_VERSION=1.41 when it talks to our engine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${COMMITLOG_DOCKER_DIR:-/var/tmp/commitlog-docker}"
sock="$dir/docker.sock"
own_host="unix://$sock"
pidfile="$dir/dockerd.pid"
# this checkout started the running private engine (so its `stop` stops it; another checkout's run,
# finding it up, uses it and leaves it)
owner="$root/.docker-engine/owner"

say() { echo "docker-engine: $*" >&2; }

docker_cli() {
    local cli=docker
    [ -x /usr/bin/docker ] && cli=/usr/bin/docker
    if [ "${DOCKER_HOST:-}" = "$own_host" ]; then DOCKER_API_VERSION=1.41 "$cli" "$@"; else "$cli" "$@"; fi
}

answers() {  # does the engine at $1 ("" = the client's default) answer?
    DOCKER_HOST="$1" docker_cli version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# The engine the user already has: DOCKER_HOST as set, or the default socket.
user_engine() {
    [ "${COMMITLOG_PRIVATE_DOCKER:-0}" = 1 ] && return 1
    if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != "$own_host" ]; then
        answers "$DOCKER_HOST" && { echo "$DOCKER_HOST"; return 0; }
        return 1
    fi
    if [ -S /var/run/docker.sock ] && (command -v docker >/dev/null 2>&1) && answers ""; then
        echo ""; return 0
    fi
    return 1
}

install_packages() {
    command -v dockerd >/dev/null 2>&1 && [ -x /usr/bin/docker ] && command -v docker-compose >/dev/null 2>&1 \
        && command -v debootstrap >/dev/null 2>&1 && return 0
    local policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        # invoke-rc.d asks this before starting a service: 101 = not now. The package's own dockerd
        # (on /var/run/docker.sock) must not start; ours does, below.
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod 0755 "$policy"
        trap 'rm -f "$policy"' RETURN
    fi
    export DEBIAN_FRONTEND=noninteractive
    local started=$SECONDS
    inst() { apt-get install -y -qq --no-install-recommends docker.io docker-compose debootstrap >/dev/null; }
    if ! inst 2>/dev/null; then
        apt-get update -qq >/dev/null
        inst
    fi
    say "installed $(dockerd --version), $(docker-compose version --short 2>/dev/null | sed 's/^/compose /') in $((SECONDS - started)) s"
}

start_private() {
    mkdir -p "$dir" "$root/.docker-engine"
    if answers "$own_host"; then
        say "private engine already up ($own_host): using it"
        return 0
    fi
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        say "dockerd $(cat "$pidfile") holds $pidfile but does not answer on $sock"
        return 1
    fi
    rm -f "$sock" "$pidfile"
    local started=$SECONDS
    # setsid: out of make's process group, so a Ctrl-C in the test run reaches pytest and not dockerd
    # (the Makefile's trap stops it)
    setsid dockerd -H "$own_host" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" \
        --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
        >"$dir/dockerd.log" 2>&1 < /dev/null &
    local pid=$!
    for _ in $(seq 1 120); do
        if answers "$own_host"; then
            echo "$pid" > "$owner"
            # A fresh private engine holds no container of ours: any left by a run that was killed
            # (compose's jobs restart unless stopped) would hold the ports the tests take.
            local left
            left="$(DOCKER_HOST="$own_host" docker_cli ps -aq)"
            [ -z "$left" ] || DOCKER_HOST="$own_host" docker_cli rm -f -v $left >/dev/null
            say "dockerd $(dockerd --version | sed 's/Docker version //; s/,.*//') up on $own_host in $((SECONDS - started)) s (log $dir/dockerd.log)"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    say "dockerd did not answer on $sock; last lines of $dir/dockerd.log:"
    tail -5 "$dir/dockerd.log" >&2
    return 1
}

cmd_start() {
    if user_engine >/dev/null; then
        say "using the engine that answers at ${DOCKER_HOST:-the default socket}"
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "no Docker engine answers and none can be installed here (needs apt-get as root);" \
            "the container tests will skip (and fail under CI=true)"
        return 0
    fi
    install_packages
    start_private
}

cmd_host() {
    local h
    if h="$(user_engine)"; then echo "$h"; return 0; fi
    answers "$own_host" && echo "$own_host"
    return 0
}

cmd_stop() {
    [ -f "$owner" ] || return 0
    local pid
    pid="$(cat "$owner")"
    rm -f "$owner"
    if [ -f "$pidfile" ] && [ "$(cat "$pidfile")" = "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { say "dockerd $pid stopped"; return 0; }; sleep 0.5; done
        say "dockerd $pid still running 30 s after SIGTERM"
    fi
}

cmd_images() {
    local h
    h="$(cmd_host)"
    if [ -z "$h" ] && ! user_engine >/dev/null; then
        say "no engine: no images built"
        return 0
    fi
    if [ "$h" != "$own_host" ]; then
        # a user's engine: the registry's bases, which it can pull (a caller's BASE stands)
        export BASE="${BASE:-debian:bookworm-slim}" JOB_BASE="${JOB_BASE:-python:3.11-slim-bookworm}"
    fi
    DOCKER_HOST="$h" DOCKER_CLI="$(command -v /usr/bin/docker || command -v docker)" \
        "$root/.ci/docker-images.sh"
}

case "${1:-}" in
    start) cmd_start ;;
    host) cmd_host ;;
    images) cmd_images ;;
    stop) cmd_stop ;;
    *) echo "usage: $0 start|host|images|stop" >&2; exit 2 ;;
esac
