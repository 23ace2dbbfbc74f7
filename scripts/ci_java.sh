#!/usr/bin/env bash
# sciworld_workflow's system dependency: a Java runtime for the ScienceWorld simulator.
#
#     bash scripts/ci_java.sh                    # then
#     .venv/bin/pytest tests/integration/workflows/test_sciworld_workflow.py
#
# Installs Debian's `default-jre-headless` when no `java` is on PATH (needs root). The
# Python side is the `scienceworld` wheel (the `envs` and `test` extras), which bundles
# the simulator's jar.
set -euo pipefail

log() { echo "[ci_java] $*" >&2; }

if ! command -v java >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        log "java is missing; run as root to install Debian's default-jre-headless package"
        exit 1
    fi
    log "installing default-jre-headless from the Debian packages"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        default-jre-headless >&2
fi

log "$(java -version 2>&1 | head -n 1)"
