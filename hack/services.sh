#!/usr/bin/env bash
# Install (from Debian's packages, when missing) and start (on loopback, when
# not running) the PostgreSQL and RabbitMQ servers Horae runs on, then create
# the role, database and vhost Horae uses. Idempotent; never stops a server it
# did not start. Needs root when something must be installed or started.
#
# PostgreSQL: Horae runs a cluster of its own (Debian's pg_createcluster: its own
# data directory, configuration and port, 5433 by default), created when missing,
# with the settings a scheduler's database wants in that cluster's own conf.d.
# Any other cluster on the machine (Debian's 15/main on 5432, say) is never
# reconfigured, restarted or stopped. A port held by anything that is not
# Horae's cluster is refused: pick another with HORAE_PG_PORT.
# A second cluster of Horae's (horae2, on 5434) is a second store group for the tests
# (docs/architecture.md, "Store groups"): the same role and database, its own primary.
#
#   hack/services.sh            ensure both services
#   hack/services.sh env        print the HORAE_* variables that reach them
#
# HORAE_PG_PORT (5433) and HORAE_PG_CLUSTER (horae) name the cluster, HORAE_PG_PORT2
# (5434) and HORAE_PG_CLUSTER2 (horae2) the second; HORAE_PG_USER,
# HORAE_PG_PASSWORD, HORAE_PG_DB, HORAE_MQ_* the rest.
set -euo pipefail

PG_USER=${HORAE_PG_USER:-horae}
PG_PASSWORD=${HORAE_PG_PASSWORD:-horae}
PG_DB=${HORAE_PG_DB:-horae}
PG_CLUSTER=${HORAE_PG_CLUSTER:-horae}
PG_PORT=${HORAE_PG_PORT:-5433}
PG_CLUSTER2=${HORAE_PG_CLUSTER2:-horae2}
PG_PORT2=${HORAE_PG_PORT2:-5434}
MQ_USER=${HORAE_MQ_USER:-horae}
MQ_PASSWORD=${HORAE_MQ_PASSWORD:-horae}
MQ_VHOST=${HORAE_MQ_VHOST:-horae}
MQ_PORT=${HORAE_MQ_PORT:-5672}
TIMEOUT=${HORAE_SERVICE_TIMEOUT:-90}

die() { echo "services: $*" >&2; exit 1; }
log() { echo "services: $*" >&2; }

if [ "${1:-}" = env ]; then
  echo "HORAE_DATABASE_URL=postgresql://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
  echo "HORAE_SECOND_DATABASE_URL=postgresql://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT2/$PG_DB"
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
# Settings a scheduler's database is run with (Debian's defaults are sized for a
# laptop): statement statistics for the benchmarks, buffers and connections for
# 10+ processes. They live in Horae's cluster's own conf.d, nowhere else.
PG_SETTINGS="# Written by hack/services.sh for Horae's own cluster; rewritten when it changes.
listen_addresses = '127.0.0.1'
shared_buffers = 1GB
max_connections = 300
shared_preload_libraries = 'pg_stat_statements'"

pg_cluster() {  # name: "version port status" of the Debian cluster called name, if any
  pg_lsclusters -h 2>/dev/null | awk -v n="$1" '$2 == n {print $1, $3, $4; exit}'
}

pg_holder() {  # port: the Debian cluster configured on port ("15/main"), if any
  pg_lsclusters -h 2>/dev/null | awk -v p="$1" '$3 == p {print $1 "/" $2; exit}'
}

pg_refuse_port() {  # port, what holds it
  die "port $1 on 127.0.0.1 is taken by $2, not Horae's PostgreSQL cluster '$PG_CLUSTER': set HORAE_PG_PORT to a free port (hack/services.sh env follows it)"
}

pg_answers() { runuser -u postgres -- psql -p "$1" -tAc 'select 1' >/dev/null 2>&1; }

# ensure_pg_cluster NAME PORT: Horae's cluster NAME exists (created with the newest
# installed PostgreSQL when missing), carries PG_SETTINGS, runs on 127.0.0.1:PORT and
# has Horae's role and database. Only cluster NAME is ever created, changed or started.
ensure_pg_cluster() {
  local name=$1 port=$2 ver have_port status holder conf
  read -r ver have_port status < <(pg_cluster "$name") || true
  if [ -n "${ver:-}" ] && [ "$have_port" != "$port" ]; then
    die "Horae's PostgreSQL cluster $ver/$name is configured on port $have_port, not $port: set HORAE_PG_PORT=$have_port, or pg_dropcluster --stop $ver $name to recreate it"
  fi
  # Horae's conf.d file marks a cluster this script made: a user's own cluster that happens
  # to bear the name is not Horae's to change.
  conf=/etc/postgresql/${ver:-none}/$name/conf.d/horae.conf
  if [ -n "${ver:-}" ] && [ ! -e "$conf" ]; then
    die "PostgreSQL cluster $ver/$name was not made by hack/services.sh (no $conf): set HORAE_PG_CLUSTER to another name"
  fi
  if [ "$(id -u)" != 0 ]; then
    # Without root, all that can be checked is that it is up, configured as wanted, and
    # lets Horae's role in.
    if [ "${status:-}" = online ] && [ "$(cat "$conf" 2>/dev/null)" = "$PG_SETTINGS" ]; then
      PGPASSWORD=$PG_PASSWORD psql -h 127.0.0.1 -p "$port" -U "$PG_USER" -d "$PG_DB" -tAc 'select 1' >/dev/null 2>&1 \
        || die "Horae's PostgreSQL cluster $ver/$name on port $port refuses $PG_USER: run hack/services.sh as root once"
      return
    fi
    die "Horae's PostgreSQL cluster '$name' on port $port is missing, stopped or not configured, and not root to fix it"
  fi
  if [ "${status:-}" != online ]; then
    holder=$(pg_holder "$port")
    if [ -n "$holder" ] && [ "$holder" != "$ver/$name" ]; then
      pg_refuse_port "$port" "PostgreSQL cluster $holder"
    fi
    port_open "$port" && pg_refuse_port "$port" "another process"
  fi
  if [ -z "${ver:-}" ]; then
    ver=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null \
      | awk -F/ '{print $5}' | sort -n | tail -1)
    [ -n "$ver" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql"
    log "creating PostgreSQL cluster $ver/$name on 127.0.0.1:$port"
    pg_createcluster "$ver" "$name" -p "$port" >/dev/null 2>&1 \
      || die "pg_createcluster $ver $name -p $port failed"
    conf=/etc/postgresql/$ver/$name/conf.d/horae.conf
  fi
  if [ "$(cat "$conf" 2>/dev/null)" != "$PG_SETTINGS" ]; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$PG_SETTINGS" >"$conf"
    chown postgres:postgres "$conf"
    if [ "${status:-}" = online ]; then
      log "restarting Horae's PostgreSQL cluster $ver/$name to apply its settings"
      pg_ctlcluster "$ver" "$name" restart >/dev/null 2>&1 \
        || die "PostgreSQL $ver/$name did not restart: see /var/log/postgresql/postgresql-$ver-$name.log"
      status=online
    fi
  fi
  if [ "${status:-}" != online ]; then
    log "starting PostgreSQL $ver/$name on 127.0.0.1:$port"
    pg_ctlcluster "$ver" "$name" start >/dev/null 2>&1 \
      || die "PostgreSQL $ver/$name did not start: see /var/log/postgresql/postgresql-$ver-$name.log"
  fi
  wait_for postgres pg_answers "$port" || die "PostgreSQL $ver/$name on port $port does not answer queries after ${TIMEOUT}s"
  pg_ensure_role_db "$port"
}

pg_ensure_role_db() {  # port
  local psql=(runuser -u postgres -- env PGOPTIONS=--client-min-messages=warning psql -p "$1" -v ON_ERROR_STOP=1 -qtA)
  if [ "$("${psql[@]}" -c "select 1 from pg_roles where rolname = '$PG_USER'")" != 1 ]; then
    "${psql[@]}" -c "create role \"$PG_USER\" login createdb password '$PG_PASSWORD'" >/dev/null
  fi
  # `horae migrate` creates the components' NOLOGIN group roles (once per cluster), and the
  # tests create login roles in them: both take CREATEROLE.
  "${psql[@]}" -c "alter role \"$PG_USER\" createrole" >/dev/null
  # Tests and benchmarks drop their databases WITH (FORCE); ending an autovacuum worker
  # still busy in one takes pg_signal_backend.
  "${psql[@]}" -c "grant pg_signal_backend to \"$PG_USER\"" >/dev/null
  if [ "$("${psql[@]}" -c "select 1 from pg_database where datname = '$PG_DB'")" != 1 ]; then
    "${psql[@]}" -c "create database \"$PG_DB\" owner \"$PG_USER\"" >/dev/null
  fi
  # Benchmarks read statement counts; harmless elsewhere.
  "${psql[@]}" -d "$PG_DB" -c "create extension if not exists pg_stat_statements" >/dev/null 2>&1 || true
}

ensure_postgres() {
  # On a fresh machine this also creates Debian's own 15/main (on 5432); it is left as it is.
  if ! command -v pg_lsclusters >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt_install postgresql postgresql-contrib
  fi
  ensure_pg_cluster "$PG_CLUSTER" "$PG_PORT"
  ensure_pg_cluster "$PG_CLUSTER2" "$PG_PORT2"
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
      # As Debian's unit does (LimitNOFILE=65536): with the shell's usual 1,024 the broker
      # runs out of file handles at about 300 quorum queues and stops accepting connections.
      # (runuser's PAM session resets the limits, so they are raised after it.) The
      # redirections are the whole subshell's: a shell left between this script and the
      # broker would hold this script's stdout, and `hack/services.sh up | tail` would
      # wait for RabbitMQ to exit.
      ( (cd / && exec setsid runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq ERL_EPMD_ADDRESS=127.0.0.1 \
        sh -c 'ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec rabbitmq-server') \
        >/var/log/rabbitmq/horae-startup.log 2>&1 </dev/null & )
    fi
    wait_for rabbitmq port_open "$MQ_PORT" \
      || die "RabbitMQ not listening on port $MQ_PORT after ${TIMEOUT}s: see /var/log/rabbitmq/"
  fi
  wait_for rabbitmq rabbit_up || die "RabbitMQ on port $MQ_PORT does not answer rabbitmqctl"
  local handles  # RabbitMQ 3.x's file-handle budget (not asked of brokers without one)
  handles=$(timeout 30 rabbitmqctl -q eval 'file_handle_cache:get_limit().' 2>/dev/null) || true
  if [[ "$handles" =~ ^[0-9]+$ ]] && [ "$handles" -lt 4000 ]; then
    log "RabbitMQ has $handles file handles (about 3 per quorum queue): restart it with" \
      "'ulimit -n 65536' (LimitNOFILE=65536) or it stops accepting connections at ~300 queues"
  fi
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
