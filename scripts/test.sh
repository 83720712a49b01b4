#!/usr/bin/env bash
# Runs jobonce's whole test suite with the race detector. It needs Go 1.26
# and Node.js 20 or later on PATH, and root to install what is missing. It
# uses the Redis, PostgreSQL, SQS, RabbitMQ and NATS servers named by
# TEST_REDIS_URL, TEST_DATABASE_URL, TEST_SQS_ENDPOINT, TEST_AMQP_URL and
# TEST_NATS_URL when they answer, and otherwise starts local ones on
# loopback, installing Debian's packages (redis-server, postgresql,
# rabbitmq-server, nats-server) when they are missing; PostgreSQL is set to
# trust loopback connections, and the servers keep running afterwards. The DynamoDB server is dynalite,
# pinned in scripts/dynalite and started on a free loopback port unless
# TEST_DYNAMODB_ENDPOINT is set. When moto is installed, moto_server is
# started too (TEST_MOTO_ENDPOINT), so the SQS and DynamoDB behaviour tests
# also run against a second implementation, and so is scripts/moto_serial.py
# (TEST_MOTO_SERIAL_ENDPOINT), moto serving one request at a time, for the
# DynamoDB transactional mode under racing copies.
# Every module of the workspace (go.work: the library, each adapter and
# heavy store, the test modules, examples, monitoring, bench) is vetted,
# then tested in one `go test -race ... work` run, whose output
# internal/testreport keeps to the failed tests; it ends with the figures
# the tests reported, the skipped tests, the failed tests with the commands
# that replay them, and the ten slowest tests. Extra arguments go to that `go test` (e.g.
# -run, -short). The monitoring module's tests run promtool and a
# Prometheus of their own, from Debian's prometheus package, installed when
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'test.sh: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

apt_updated=
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "need to install $*, but not root: install them, or set the TEST_* URLs to running servers"
    exit 1
  fi
  # A freshly booted machine may hold dpkg's lock for its own upgrades.
  [ -n "$apt_updated" ] || { apt-get -o DPkg::Lock::Timeout=600 update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
}

# Waits up to 30 s for a command to succeed.
wait_for() {
  local what=$1; shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "$what did not come up"; return 1
}

ensure_redis() {
  export TEST_REDIS_URL=${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}
  have redis-cli || apt_install redis-server redis-tools
  redis-cli -u "$TEST_REDIS_URL" ping >/dev/null 2>&1 && return 0
  log "starting redis-server on 127.0.0.1:6379"
  have redis-server || apt_install redis-server
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no \
    --dir /tmp --logfile /tmp/jobonce-redis.log
  wait_for "redis (see /tmp/jobonce-redis.log)" redis-cli -u "$TEST_REDIS_URL" ping
}

ensure_postgres() {
  export TEST_DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
  have psql || apt_install postgresql postgresql-client
  psql "$TEST_DATABASE_URL" -Atc 'select 1' >/dev/null 2>&1 && return 0
  log "starting PostgreSQL on 127.0.0.1:5432"
  have pg_ctlcluster || apt_install postgresql
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$version" ]; then
    apt_install postgresql
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
  fi
  local hba=/etc/postgresql/$version/main/pg_hba.conf
  if ! grep -q '^# jobonce test' "$hba"; then
    # Trust loopback connections, as the test URL has no password.
    { echo '# jobonce test: trust loopback'
      echo 'host all all 127.0.0.1/32 trust'
      echo 'host all all ::1/128 trust'
      cat "$hba"; } > "$hba.new" && mv "$hba.new" "$hba"
    chown postgres:postgres "$hba" 2>/dev/null || true
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null ||
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  wait_for "postgres" su postgres -c "psql -Atc 'select 1'"
  su postgres -c "psql -Atc \"select 1 from pg_database where datname='test'\"" | grep -q 1 ||
    su postgres -c "createdb test"
  wait_for "postgres at $TEST_DATABASE_URL" psql "$TEST_DATABASE_URL" -Atc 'select 1'
}

# Prints the host and port of a URL (scheme://[user[:password]@]host[:port]/…),
# the port defaulting to $2.
url_host_port() {
  local rest=${1#*://}
  rest=${rest%%/*}
  rest=${rest##*@}
  local host=${rest%%:*} port=$2
  [ "$rest" = "$host" ] || port=${rest##*:}
  echo "$host $port"
}

# Succeeds when a TCP connection to host $1, port $2 opens.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# RabbitMQ, for the Watermill crash test on watermill-amqp.
ensure_rabbitmq() {
  export TEST_AMQP_URL=${TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
  local host port
  read -r host port < <(url_host_port "$TEST_AMQP_URL" 5672)
  tcp_open "$host" "$port" && return 0
  have rabbitmq-server || apt_install rabbitmq-server
  tcp_open "$host" "$port" && return 0  # the package's install started it
  log "starting RabbitMQ on 127.0.0.1:5672"
  RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5672 ERL_EPMD_ADDRESS=127.0.0.1 \
    rabbitmq-server -detached
  # Its first boot can take longer than wait_for's 30 s on a busy machine.
  for _ in $(seq 900); do tcp_open 127.0.0.1 5672 && return 0; sleep 0.1; done
  log "rabbitmq did not come up (see /var/log/rabbitmq)"; return 1
}

# NATS with JetStream, for the Watermill crash test on watermill-nats. A
# server started here keeps running after the tests, as Redis does.
ensure_nats() {
  export TEST_NATS_URL=${TEST_NATS_URL:-nats://127.0.0.1:4222}
  local host port
  read -r host port < <(url_host_port "$TEST_NATS_URL" 4222)
  if tcp_open "$host" "$port"; then
    nats_jetstream "$host" "$port" && return 0
    log "NATS at $TEST_NATS_URL runs without JetStream (Debian's nats-server.service? systemctl disable --now nats-server)"
    return 1
  fi
  log "starting nats-server -js on 127.0.0.1:4222"
  if ! have nats-server; then
    apt_install nats-server
    # The package starts a server of its own, without JetStream, where
    # systemd runs: the tests need one with it.
    if [ -d /run/systemd/system ]; then systemctl disable --now nats-server.service >/dev/null 2>&1 || true; fi
  fi
  mkdir -p /tmp/jobonce-nats
  nats-server -a 127.0.0.1 -p 4222 -js -sd /tmp/jobonce-nats -l /tmp/jobonce-nats.log \
    </dev/null >/dev/null 2>&1 &
  wait_for "nats-server (see /tmp/jobonce-nats.log)" nats_jetstream 127.0.0.1 4222
}

# Succeeds when the NATS server at host $1, port $2 has JetStream on, as the
# INFO line it greets a client with says.
nats_jetstream() {
  local info
  info=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && head -n 1 <&3' "$1" "$2" 2>/dev/null) || return 1
  [[ $info == *'"jetstream":true'* ]]
}

# Prometheus and promtool, for the monitoring module's tests, which start
# a Prometheus of their own. The package may start a service of its own
# where systemd runs; the tests never use it.
ensure_prometheus() {
  have prometheus && have promtool && return 0
  apt_install prometheus
}

# start_node_server NAME DIR starts DIR/server.mjs (npm packages pinned by
# DIR/package-lock.json), which prints its URL on its first line, and sets
# node_url to that URL and node_pid to its process.
node_url=
node_pid=
start_node_server() {
  local name=$1 dir=$2
  have node && have npm || apt_install nodejs npm
  node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || {
    log "Node.js $(node --version) is too old: the $name test server needs Node.js 20 or later (Debian 12's is 18)"
    exit 1
  }
  # npm ci again when the lock file changed since, or an install was cut short.
  if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.jobonce-lock"; then
    log "installing the $name test server (npm ci in $dir)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$dir/package-lock.json" "$dir/node_modules/.jobonce-lock"
  fi
  local out
  out=$(mktemp)
  node "$dir/server.mjs" >"$out" 2>"$out.err" &
  node_pid=$!
  for _ in $(seq 300); do
    if [ -s "$out" ]; then break; fi
    kill -0 "$node_pid" 2>/dev/null || { cat "$out.err" >&2; log "$name server exited"; exit 1; }
    sleep 0.1
  done
  node_url=$(head -n 1 "$out")
  [ -n "$node_url" ] || { cat "$out.err" >&2; log "$name server did not start"; exit 1; }
}

sqs_pid=
ensure_sqs() {
  if [ -n "${TEST_SQS_ENDPOINT:-}" ]; then return 0; fi
  start_node_server SQS scripts/fauxqs
  sqs_pid=$node_pid
  export TEST_SQS_ENDPOINT=$node_url
  log "SQS server at $TEST_SQS_ENDPOINT"
}

dynamodb_pid=
ensure_dynamodb() {
  if [ -n "${TEST_DYNAMODB_ENDPOINT:-}" ]; then return 0; fi
  start_node_server DynamoDB scripts/dynalite
  dynamodb_pid=$node_pid
  export TEST_DYNAMODB_ENDPOINT=$node_url
  log "DynamoDB server (dynalite) at $TEST_DYNAMODB_ENDPOINT"
}

# A second SQS and DynamoDB implementation for the behaviour tests, when
# moto_server is installed (it is on the CI machines); the tests that need
# it skip, saying so, without it.
moto_pid=
ensure_moto() {
  if [ -n "${TEST_MOTO_ENDPOINT:-}" ]; then return 0; fi
  if ! have moto_server; then
    log "moto_server is not installed: the SQS behaviour tests run on fauxqs only"
    return 0
  fi
  local port
  port=$(free_port) || { log "no free port for moto_server: the SQS behaviour tests run on fauxqs only"; return 0; }
  moto_server -H 127.0.0.1 -p "$port" >/tmp/jobonce-moto.log 2>&1 &
  moto_pid=$!
  local endpoint=http://127.0.0.1:$port
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      export TEST_MOTO_ENDPOINT=$endpoint
      log "moto at $TEST_MOTO_ENDPOINT"
      return 0
    fi
    kill -0 "$moto_pid" 2>/dev/null || break
    sleep 0.1
  done
  log "moto_server did not come up (see /tmp/jobonce-moto.log): the SQS behaviour tests run on fauxqs only"
  kill "$moto_pid" 2>/dev/null || true
  moto_pid=
}

# moto serving one request at a time (scripts/moto_serial.py), where each
# conditional write and TransactWriteItems is atomic: the DynamoDB
# transactional mode under racing copies, and the Lambda + DynamoDB crash
# experiment's transactional row, run on it.
moto_serial_pid=
ensure_moto_serial() {
  if [ -n "${TEST_MOTO_SERIAL_ENDPOINT:-}" ]; then return 0; fi
  if ! have python3 || ! python3 -c 'import moto, werkzeug' 2>/dev/null; then
    log "python3 with moto is not installed: the DynamoDB transactional tests under racing copies skip"
    return 0
  fi
  local out=/tmp/jobonce-moto-serial.log
  python3 scripts/moto_serial.py >"$out" 2>&1 &
  moto_serial_pid=$!
  local url
  for _ in $(seq 300); do
    url=$(head -n 1 "$out" 2>/dev/null)
    if [[ $url == http://* ]]; then
      export TEST_MOTO_SERIAL_ENDPOINT=$url
      log "moto, one request at a time, at $TEST_MOTO_SERIAL_ENDPOINT"
      return 0
    fi
    kill -0 "$moto_serial_pid" 2>/dev/null || break
    sleep 0.1
  done
  log "scripts/moto_serial.py did not come up (see $out): the DynamoDB transactional tests under racing copies skip"
  kill "$moto_serial_pid" 2>/dev/null || true
  moto_serial_pid=
}

# Prints a free TCP port on 127.0.0.1.
free_port() {
  if have python3; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  elif have node; then
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
  else
    return 1
  fi
}

cleanup() {
  [ -z "$sqs_pid" ] || kill "$sqs_pid" 2>/dev/null || true
  [ -z "$moto_pid" ] || kill "$moto_pid" 2>/dev/null || true
  [ -z "$moto_serial_pid" ] || kill "$moto_serial_pid" 2>/dev/null || true
  [ -z "$dynamodb_pid" ] || kill "$dynamodb_pid" 2>/dev/null || true
}
trap cleanup EXIT

ensure_redis
ensure_postgres
ensure_rabbitmq
ensure_nats
ensure_sqs
ensure_dynamodb
ensure_moto
ensure_moto_serial
ensure_prometheus
export JOBONCE_REPORT="$(mktemp)"  # headline figures of passing tests (testenv.Report)
reporter=$(mktemp)
go build -o "$reporter" ./internal/testreport
log "go vet work (every module listed in go.work)"
go vet work
log "go test -race work $* (every module; the output of failed tests only; then how to replay them and the slowest tests)"
status=0
go test -race -count=1 -timeout 20m -json "$@" work | "$reporter" || status=$?
rm -f "$reporter" "$JOBONCE_REPORT"
exit "$status"
