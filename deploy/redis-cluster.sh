#!/usr/bin/env bash
# A local Redis Cluster of three masters and three replicas, for trying REDIS_CLUSTER_NODES:
#   deploy/redis-cluster.sh start   # ports 7000-7005 (REDIS_CLUSTER_PORT to move them)
#   REDIS_CLUSTER_NODES=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 REDIS_MIN_REPLICAS_ACKED=1 npm start
#   deploy/redis-cluster.sh stop    # stops the nodes; their files stay in the data dir
#   deploy/redis-cluster.sh kill-master-of <key>   # SIGKILL the master of a key's slot
# Each node keeps an AOF fsync'd on every write in $REDIS_CLUSTER_DIR (default
# ./redis-cluster-data), so a stopped cluster starts again with its documents. The
# cluster-node-timeout is 2000 ms: a dead master's replica takes over after about 3 s.
# REDIS_CLUSTER_APPENDONLY=no keeps nothing on disk (benchmarks of replication alone).
set -euo pipefail
base=${REDIS_CLUSTER_PORT:-7000}
dir=${REDIS_CLUSTER_DIR:-./redis-cluster-data}
ports=$(seq "$base" $((base + 5)))

start() {
  mkdir -p "$dir"
  for port in $ports; do
    mkdir -p "$dir/$port"
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
      --dir "$dir/$port" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 --save '' \
      $(if [ "${REDIS_CLUSTER_APPENDONLY:-yes}" = no ]; then echo --appendonly no; else echo --appendonly yes --appendfsync always; fi) \
      --logfile "$dir/$port/redis.log" --pidfile "$dir/$port/redis.pid"
  done
  for port in $ports; do
    for _ in $(seq 1 50); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  if ! redis-cli -p "$base" cluster info | grep -q cluster_state:ok; then
    # shellcheck disable=SC2046
    redis-cli --cluster create $(for port in $ports; do echo "127.0.0.1:$port"; done) \
      --cluster-replicas 1 --cluster-yes >/dev/null
    for _ in $(seq 1 100); do
      redis-cli -p "$base" cluster info | grep -q cluster_state:ok && break
      sleep 0.1
    done
  fi
  echo "REDIS_CLUSTER_NODES=127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
}

stop() {
  for port in $ports; do
    [ -f "$dir/$port/redis.pid" ] && kill "$(cat "$dir/$port/redis.pid")" 2>/dev/null || true
  done
}

kill_master_of() {
  local slot line
  slot=$(redis-cli -p "$base" cluster keyslot "$1")
  line=$(redis-cli -p "$base" cluster shards | tr -d '\r' | awk -v s="$slot" '
    /^slots$/ { getline a; getline b; inrange = (s >= a && s <= b); next }
    inrange && /^port$/ { getline p; port = p }
    inrange && /^role$/ { getline r; if (r == "master") { print port; exit } }')
  [ -n "$line" ] || { echo "no master found for slot $slot" >&2; exit 1; }
  kill -9 "$(cat "$dir/$line/redis.pid")"
  echo "killed the master on port $line (slot $slot)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  kill-master-of) kill_master_of "${2:?a key}" ;;
  *) echo "usage: $0 start|stop|kill-master-of <key>" >&2; exit 2 ;;
esac
