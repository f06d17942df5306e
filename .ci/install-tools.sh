#!/usr/bin/env bash
# The Debian programs some tests need: Prometheus and promtool (tests/deploy/test_metrics_prometheus.py) and
# strace, which injects I/O errors into a running writer (tests/e2e/crash/test_injected_faults.py). Installed once,
# quietly, where apt-get is and we are root (a fresh CI machine); elsewhere one line says why those tests
# will skip. Run by `make test` before pytest; does nothing when every program is there.
#
# The package's own service (a server on :9090 with its data in /var/lib/prometheus) is kept from
# starting: the test starts a server of its own, on a free loopback port, with a scratch data directory.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && command -v strace >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-tools: prometheus/promtool/strace missing and not installable here (needs apt-get as root);" \
         "the metrics test against a real Prometheus and the injected-fault tests will skip (the fault tests fail under CI=true)" >&2
    exit 0
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    # invoke-rc.d asks this before starting a service: 101 = not now (Debian's policy-rc.d interface)
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -qq --no-install-recommends prometheus strace >/dev/null; }
if ! install 2>/dev/null; then
    apt-get update -qq >/dev/null
    install
fi
echo "install-tools: $(prometheus --version 2>&1 | head -1); $(strace -V 2>&1 | head -1)" >&2
