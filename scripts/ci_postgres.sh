#!/usr/bin/env bash
# Start a PostgreSQL server for the buffer's PostgreSQL tests and print its URL.
#
#     eval "$(scripts/ci_postgres.sh)"      # sets TRINITY_TEST_POSTGRES_URL
#     .venv/bin/pytest tests/unit/buffer tests/integration/buffer
#
# Installs Debian's `postgresql` when it is missing (needs root), creates a cluster
# named `trinity` that listens on 127.0.0.1 only (port $TRINITY_PG_PORT, default 55432,
# so a server already on 5432 is left alone), starts it, and creates a user and a
# database. Running it again reuses the cluster. Everything but the final `export` line
# goes to stderr, so the output can be eval'ed. The Python driver is `psycopg[binary]`
# (the `test` extra).
set -euo pipefail

PORT="${TRINITY_PG_PORT:-55432}"
CLUSTER="trinity"
DB_USER="trinity"
DB_PASSWORD="trinity"
DB_NAME="trinity_test"

log() { echo "[ci_postgres] $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "run as root: it installs packages and starts the server as the postgres user"
    exit 1
fi

if ! command -v pg_createcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing postgresql from the Debian packages"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2
fi

VERSION="$(ls /usr/lib/postgresql | sort -n | tail -n 1)"
# the socket directory lives on a tmpfs in some containers and vanishes on restart
install -d -o postgres -g postgres -m 2775 /var/run/postgresql

if ! pg_lsclusters -h | awk '{print $1"/"$2}' | grep -qx "${VERSION}/${CLUSTER}"; then
    log "creating cluster ${VERSION}/${CLUSTER} on 127.0.0.1:${PORT}"
    pg_createcluster --port="${PORT}" --start-conf=manual "${VERSION}" "${CLUSTER}" \
        -- --auth-local=peer --auth-host=scram-sha-256 >&2
fi
# loopback only: tests never need the server to be reachable from elsewhere
printf "listen_addresses = '127.0.0.1'\n" >"/etc/postgresql/${VERSION}/${CLUSTER}/conf.d/trinity.conf"

if ! pg_ctlcluster "${VERSION}" "${CLUSTER}" status >/dev/null 2>&1; then
    log "starting cluster ${VERSION}/${CLUSTER}"
    pg_ctlcluster "${VERSION}" "${CLUSTER}" start >&2
fi
PORT="$(pg_lsclusters -h | awk -v v="${VERSION}" -v c="${CLUSTER}" '$1==v && $2==c {print $3}')"

psql_admin() {
    runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "${PORT}" -d postgres "$@" >&2
}

for _ in $(seq 1 30); do
    if runuser -u postgres -- pg_isready -q -p "${PORT}" -h 127.0.0.1; then
        break
    fi
    sleep 1
done
runuser -u postgres -- pg_isready -p "${PORT}" -h 127.0.0.1 >&2

psql_admin -c "DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${DB_USER}') THEN
        CREATE ROLE ${DB_USER} LOGIN PASSWORD '${DB_PASSWORD}' CREATEDB;
    END IF;
END \$\$;"
if [ -z "$(runuser -u postgres -- psql -X -tA -p "${PORT}" -d postgres \
    -c "SELECT 1 FROM pg_database WHERE datname = '${DB_NAME}'")" ]; then
    psql_admin -c "CREATE DATABASE ${DB_NAME} OWNER ${DB_USER}"
fi

log "ready: database ${DB_NAME} on 127.0.0.1:${PORT}"
echo "export TRINITY_TEST_POSTGRES_URL=postgresql+psycopg://${DB_USER}:${DB_PASSWORD}@127.0.0.1:${PORT}/${DB_NAME}"
