#!/usr/bin/env bash
# The browser tests' system dependency: Debian's chromium, driven by Playwright.
#
#     bash scripts/ci_browser.sh                 # then
#     .venv/bin/pytest tests/browser
#
# Installs the `chromium` Debian package when /usr/bin/chromium is missing (needs root).
# The Python side is the `playwright` and `streamlit` packages (the `studio` and `test`
# extras); Playwright's own browser download (`playwright install`) is never used: the
# tests launch /usr/bin/chromium through executable_path.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

log() { echo "[ci_browser] $*" >&2; }

if [ ! -x "$CHROMIUM" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "$CHROMIUM is missing; run as root to install Debian's chromium package"
        exit 1
    fi
    log "installing chromium from the Debian packages"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2
fi

# Debian's wrapper script may complain on stderr about the environment; the version is what counts
log "$("$CHROMIUM" --version 2>/dev/null)"
