#!/usr/bin/env bash
# Builds the images the container tests, docker-compose.yml and the containerized Spark cluster run,
# each only when its inputs changed: every image carries a label `commitlog.stamp`, the hash of what
# it was built from (files and build arguments), and is rebuilt when that hash differs (as `make jvm`
# copies a jar set again only when the pom changes). Called by `.ci/docker-engine.sh images`, with
# DOCKER_HOST set and DOCKER_CLI naming the client.
#
#   local/debian:bookworm        the base where no image registry answers: `debootstrap --variant=minbase
#                                bookworm` from the mirror apt uses here, then `docker import`
#   commitlog-ingest/kafka:4.1.1 Apache Kafka from the jars `make jvm` resolves (deploy/kafka/)
#   commitlog-ingest/prometheus  Debian's prometheus package (deploy/prometheus/Dockerfile)
#   commitlog-ingest:0.1.0       the job (deploy/Dockerfile), installed with deploy/install.sh
#
# BASE (default: local/debian:bookworm) is the Kafka and Prometheus images' base, JOB_BASE (default:
# BASE) the job image's; .ci/docker-engine.sh sets them to the registry's debian:bookworm-slim and
# python:3.11-slim-bookworm on a user's own engine, which can pull them.
# Builds use the host's network (`--network host`): apt-get and pip inside them reach the package
# mirrors directly, and the engine has no bridge.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cli="${DOCKER_CLI:-docker}"
if [ "${DOCKER_HOST:-}" = "unix:///var/tmp/commitlog-docker/docker.sock" ] || [ -n "${COMMITLOG_DOCKER_API:-}" ]; then
    export DOCKER_API_VERSION="${COMMITLOG_DOCKER_API:-1.41}"
fi
BASE="${BASE:-local/debian:bookworm}"
JOB_BASE="${JOB_BASE:-$BASE}"
KAFKA_IMAGE=commitlog-ingest/kafka:4.1.1
PROMETHEUS_IMAGE=commitlog-ingest/prometheus:bookworm
JOB_IMAGE=commitlog-ingest:0.1.0

say() { echo "docker-images: $*" >&2; }
stamp_of() { "$cli" image inspect --format '{{index .Config.Labels "commitlog.stamp"}}' "$1" 2>/dev/null || true; }
hash_files() { (cd "$root" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16; }

# The mirror apt uses here (deb822 .sources or a classic sources.list line).
apt_mirror() {
    local uri
    uri="$(grep -hs -m1 '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | head -1)"
    [ -n "$uri" ] || uri="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | head -1)"
    echo "${uri:-http://deb.debian.org/debian}"
}

base_image() {
    [ "$BASE" = local/debian:bookworm ] || [ "$JOB_BASE" = local/debian:bookworm ] || return 0
    local local_base=local/debian:bookworm
    "$cli" image inspect "$local_base" >/dev/null 2>&1 && return 0
    command -v debootstrap >/dev/null || { say "no debootstrap (apt-get install debootstrap) for $local_base"; return 1; }
    local rootfs started=$SECONDS mirror
    mirror="$(apt_mirror)"
    rootfs="$(mktemp -d /var/tmp/commitlog-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' RETURN
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -5 "$rootfs.log" >&2; return 1; }
    rm -f "$rootfs.log"
    # what the registry's debian images do too: no docs and no apt lists in the layer
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
    tar -C "$rootfs" -c . | "$cli" import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$local_base" >/dev/null
    say "$local_base from debootstrap ($mirror) in $((SECONDS - started)) s"
}

# build IMAGE STAMP CONTEXT DOCKERFILE [docker build options]
build() {
    local image=$1 stamp=$2 context=$3 dockerfile=$4 started=$SECONDS
    shift 4
    if [ "$(stamp_of "$image")" = "$stamp" ]; then return 0; fi
    "$cli" build --network host -q --build-arg BASE="$BASE" --label commitlog.stamp="$stamp" "$@" \
        -f "$dockerfile" -t "$image" "$context" >/dev/null
    "$cli" image prune -f >/dev/null   # the image this one replaced
    say "$image built in $((SECONDS - started)) s ($("$cli" image inspect --format '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
}

kafka_image() {
    local jars="$root/deploy/jvm/lib/kafka"
    [ -f "$jars/.resolved" ] || { say "$KAFKA_IMAGE needs the Kafka jars: make jvm"; return 1; }
    local stamp
    stamp="$BASE-$(hash_files deploy/kafka deploy/jvm/pom.xml)"
    [ "$(stamp_of "$KAFKA_IMAGE")" = "$stamp" ] && return 0
    # the jar directory may be a symlink (a worktree's), which a build context would not follow
    local ctx
    ctx="$(mktemp -d /var/tmp/commitlog-kafka-ctx.XXXXXX)"
    trap 'rm -rf "$ctx"' RETURN
    mkdir -p "$ctx/jvm/lib" "$ctx/kafka"
    cp -rL "$jars" "$ctx/jvm/lib/kafka"
    cp "$root"/deploy/kafka/* "$ctx/kafka/"
    build "$KAFKA_IMAGE" "$stamp" "$ctx" "$ctx/kafka/Dockerfile"
}

prometheus_image() {
    build "$PROMETHEUS_IMAGE" "$BASE-$(hash_files deploy/prometheus/Dockerfile)" "$root/deploy/prometheus" \
        "$root/deploy/prometheus/Dockerfile"
}

job_image() {
    # what deploy/Dockerfile copies
    local stamp
    stamp="$JOB_BASE-$(hash_files deploy/Dockerfile pyproject.toml setup.py README.md ingest sink store \
        deploy/install.sh deploy/driver.py deploy/entrypoint.sh deploy/spark-submit.sh \
        -not -name '*.so' -not -name '*.pyc')"
    local ca=""
    ca="$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)"
    BASE="$JOB_BASE" build "$JOB_IMAGE" "$stamp" "$root" "$root/deploy/Dockerfile" --build-arg EXTRA_CA_CERTS="$ca"
}

case "${1:-all}" in
    all) base_image; kafka_image; prometheus_image; job_image ;;
    base) base_image ;;
    kafka) base_image; kafka_image ;;
    prometheus) base_image; prometheus_image ;;
    job) base_image; job_image ;;
    *) echo "usage: $0 [all|base|kafka|prometheus|job]" >&2; exit 2 ;;
esac
