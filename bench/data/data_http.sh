#!/usr/bin/env bash
# data_http.sh [GIB] [SHARD_MIB] [ROUNDS]: ShardedDataset reading a generated data set of GIB GiB
# (default 1, shards of SHARD_MIB MiB, default 64) over HTTP from a real nginx started here on a
# free loopback port, against `curl` reading the same files from the same server, in ROUNDS
# interleaved rounds (default 3): one JSON line (build/bench/data_http; bench/data/data_http.cpp
# says what is measured). Everything goes under ${DATA_BENCH_DIR:-/var/tmp/cohort-http-bench} and is
# removed afterwards. Needs nginx (scripts/setup-test-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
gib="${1:-1}" shard_mib="${2:-64}" rounds="${3:-3}"
work="${DATA_BENCH_DIR:-/var/tmp/cohort-http-bench}"
mkdir -p "$work/root" "$work/nginx"
nginx_pid=""
cleanup() { [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
n="$work/nginx"
{
  [ "$(id -u)" = 0 ] && echo "user root;"
  echo "daemon off; master_process off; worker_processes 1; pid $n/nginx.pid; error_log $n/error.log;"
  echo "events { worker_connections 64; }"
  echo "http { access_log off; sendfile on; default_type application/octet-stream;"
  echo "  client_body_temp_path $n/body; proxy_temp_path $n/proxy; fastcgi_temp_path $n/fastcgi;"
  echo "  uwsgi_temp_path $n/uwsgi; scgi_temp_path $n/scgi;"
  echo "  server { listen 127.0.0.1:$port; root $work/root; } }"
} > "$n/nginx.conf"
/usr/sbin/nginx -p "$n" -c "$n/nginx.conf" -e "$n/error.log" &
nginx_pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
echo "data_http: $gib GiB in $shard_mib MiB shards from nginx $(/usr/sbin/nginx -v 2>&1 | sed 's/.*\///') on port $port, $rounds rounds"
build/bench/data_http --root "$work/root" --url "http://127.0.0.1:$port/" --cache "$work/cache" \
  --gib "$gib" --shard-mib "$shard_mib" --rounds "$rounds"
