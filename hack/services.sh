#!/usr/bin/env bash
# Install (from Debian's packages, when missing) and start (on loopback, when
# not running) the PostgreSQL and RabbitMQ servers Horae runs on, then create
# the role, database and vhost Horae uses. Idempotent; never stops a server it
# did not start. Needs root when something must be installed or started.
#
#   hack/services.sh            ensure both services
#   hack/services.sh env        print the HORAE_* variables that reach them
set -euo pipefail

PG_USER=${HORAE_PG_USER:-horae}
PG_PASSWORD=${HORAE_PG_PASSWORD:-horae}
PG_DB=${HORAE_PG_DB:-horae}
PG_PORT=${HORAE_PG_PORT:-5432}
MQ_USER=${HORAE_MQ_USER:-horae}
MQ_PASSWORD=${HORAE_MQ_PASSWORD:-horae}
MQ_VHOST=${HORAE_MQ_VHOST:-horae}
MQ_PORT=${HORAE_MQ_PORT:-5672}
TIMEOUT=${HORAE_SERVICE_TIMEOUT:-90}

die() { echo "services: $*" >&2; exit 1; }
log() { echo "services: $*" >&2; }

if [ "${1:-}" = env ]; then
  echo "HORAE_DATABASE_URL=postgresql://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
  echo "HORAE_BROKER_URL=amqp://$MQ_USER:$MQ_PASSWORD@127.0.0.1:$MQ_PORT/$MQ_VHOST"
  exit 0
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {  # description, command...
  local what=$1; shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

apt_updated=
apt_install() {
  [ "$(id -u)" = 0 ] || die "$* missing and not root: install it (apt-get install $*) or run as root"
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    timeout 600 apt-get update -qq >/dev/null || die "apt-get update failed"
    apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
    || die "apt-get install $* failed"
}

# ---- PostgreSQL -------------------------------------------------------------
ensure_postgres() {
  local ver cluster
  if ! command -v pg_lsclusters >/dev/null || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
    apt_install postgresql postgresql-contrib
  fi
  if ! port_open "$PG_PORT"; then
    read -r ver cluster _ < <(pg_lsclusters -h | awk -v p="$PG_PORT" '$3 == p' | head -1) || true
    [ -n "${ver:-}" ] || die "no PostgreSQL cluster is configured on port $PG_PORT"
    log "starting PostgreSQL $ver/$cluster on 127.0.0.1:$PG_PORT"
    pg_ctlcluster "$ver" "$cluster" start >/dev/null 2>&1 \
      || die "PostgreSQL $ver/$cluster did not start: see /var/log/postgresql/postgresql-$ver-$cluster.log"
    wait_for postgres port_open "$PG_PORT" || die "PostgreSQL not accepting connections on port $PG_PORT after ${TIMEOUT}s"
  fi
  wait_for postgres runuser -u postgres -- psql -p "$PG_PORT" -tAc 'select 1' \
    || die "PostgreSQL on port $PG_PORT does not answer queries"
  local psql=(runuser -u postgres -- psql -p "$PG_PORT" -v ON_ERROR_STOP=1 -qtA)
  # Settings a scheduler's database is run with (Debian's defaults are sized for a laptop):
  # statement statistics for the benchmarks, buffers and connections for 10+ processes.
  # Applied once, with one restart, the first time this cluster is seen.
  if [ "$("${psql[@]}" -c 'show shared_preload_libraries')" != pg_stat_statements ]; then
    "${psql[@]}" -c "alter system set shared_preload_libraries = 'pg_stat_statements'" \
      -c "alter system set shared_buffers = '1GB'" -c "alter system set max_connections = 300" >/dev/null
    read -r ver cluster _ < <(pg_lsclusters -h | awk -v p="$PG_PORT" '$3 == p' | head -1)
    log "restarting PostgreSQL $ver/$cluster once to apply its settings"
    pg_ctlcluster "$ver" "$cluster" restart >/dev/null 2>&1 \
      || die "PostgreSQL $ver/$cluster did not restart: see /var/log/postgresql/postgresql-$ver-$cluster.log"
    wait_for postgres runuser -u postgres -- psql -p "$PG_PORT" -tAc 'select 1' \
      || die "PostgreSQL on port $PG_PORT does not answer queries after its restart"
  fi
  if [ "$("${psql[@]}" -c "select 1 from pg_roles where rolname = '$PG_USER'")" != 1 ]; then
    "${psql[@]}" -c "create role \"$PG_USER\" login createdb password '$PG_PASSWORD'" >/dev/null
  fi
  # Tests and benchmarks drop their databases WITH (FORCE); ending an autovacuum worker
  # still busy in one takes pg_signal_backend.
  "${psql[@]}" -c "grant pg_signal_backend to \"$PG_USER\"" >/dev/null
  if [ "$("${psql[@]}" -c "select 1 from pg_database where datname = '$PG_DB'")" != 1 ]; then
    "${psql[@]}" -c "create database \"$PG_DB\" owner \"$PG_USER\"" >/dev/null
  fi
  # Benchmarks read statement counts; harmless elsewhere.
  "${psql[@]}" -d "$PG_DB" -c "create extension if not exists pg_stat_statements" >/dev/null 2>&1 || true
}

# ---- RabbitMQ ---------------------------------------------------------------
rabbit_up() { timeout 20 rabbitmqctl -q status >/dev/null 2>&1; }

ensure_rabbitmq() {
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  if ! port_open "$MQ_PORT"; then
    [ "$(id -u)" = 0 ] || die "RabbitMQ not running on port $MQ_PORT and not root to start it"
    local envconf=/etc/rabbitmq/rabbitmq-env.conf
    grep -q '^NODE_IP_ADDRESS=' "$envconf" 2>/dev/null || echo "NODE_IP_ADDRESS=127.0.0.1" >>"$envconf"
    grep -q '^NODE_PORT=' "$envconf" 2>/dev/null || echo "NODE_PORT=$MQ_PORT" >>"$envconf"
    grep -q 'ERL_EPMD_ADDRESS' "$envconf" 2>/dev/null || echo "export ERL_EPMD_ADDRESS=127.0.0.1" >>"$envconf"
    log "starting RabbitMQ on 127.0.0.1:$MQ_PORT"
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
      systemctl start rabbitmq-server || die "RabbitMQ did not start: see journalctl -u rabbitmq-server"
    else
      mkdir -p /var/log/rabbitmq && chown rabbitmq:rabbitmq /var/log/rabbitmq
      (cd / && setsid runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq ERL_EPMD_ADDRESS=127.0.0.1 \
        rabbitmq-server >/var/log/rabbitmq/horae-startup.log 2>&1 </dev/null &)
    fi
    wait_for rabbitmq port_open "$MQ_PORT" \
      || die "RabbitMQ not listening on port $MQ_PORT after ${TIMEOUT}s: see /var/log/rabbitmq/"
  fi
  wait_for rabbitmq rabbit_up || die "RabbitMQ on port $MQ_PORT does not answer rabbitmqctl"
  local ctl=(timeout 30 rabbitmqctl -q)
  if ! "${ctl[@]}" list_users | awk '{print $1}' | grep -qx "$MQ_USER"; then
    "${ctl[@]}" add_user "$MQ_USER" "$MQ_PASSWORD" >/dev/null
  fi
  "${ctl[@]}" set_user_tags "$MQ_USER" administrator >/dev/null
  if ! "${ctl[@]}" list_vhosts | grep -qx "$MQ_VHOST"; then
    "${ctl[@]}" add_vhost "$MQ_VHOST" >/dev/null
  fi
  "${ctl[@]}" set_permissions -p "$MQ_VHOST" "$MQ_USER" ".*" ".*" ".*" >/dev/null
}

# ---- libfaketime -------------------------------------------------------------
# A worker under a clock offset (the chaos suite's clock fault, tests/e2e/test_worker.py)
# runs with libfaketime preloaded. Without root it is left out: those tests say so and skip.
ensure_faketime() {
  [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] && return
  if [ "$(id -u)" = 0 ]; then
    apt_install faketime
  else
    log "libfaketime missing and not root: clock-offset tests will be skipped (apt-get install faketime)"
  fi
}

ensure_postgres
ensure_rabbitmq
ensure_faketime
log "PostgreSQL on 127.0.0.1:$PG_PORT (db $PG_DB), RabbitMQ on 127.0.0.1:$MQ_PORT (vhost $MQ_VHOST) ready"
