#!/usr/bin/env bash
# The resume load against real agui-host processes (examples/load_resume.rs): the fake upstream,
# N agui-host replicas on free ports (and redis-server on a free port, without persistence, for
# the redis store), then 1,000 concurrent runs spread round robin over the replicas, 10% of
# whose clients drop their connection mid-stream and resume on the next replica with
# Last-Event-ID. Prints runs/s, p50/p99, CPU per run of each replica and of Redis; exits
# non-zero if any stream lost or repeated an event or was not well formed.
#
#   scripts/load-scale.sh                                   # 2 replicas sharing Redis
#   scripts/load-scale.sh --replicas 1 --store memory       # 1 replica, its own log
#   scripts/load-scale.sh --replicas 1 --store off --resume-percent 0   # no store, no resumes
#   scripts/load-scale.sh --runs 200 --chunks 200 --chunk-delay-ms 0    # throughput
#
# Needs cargo, curl, and redis-server for the redis store. Builds the release binary and the
# example first. Stops every process it started when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

replicas=2 store=redis runs=1000 resume=10 chunks=20 delay=100
while [[ $# -gt 0 ]]; do
  case "$1" in
    --replicas) replicas="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --resume-percent) resume="$2"; shift 2 ;;
    --chunks) chunks="$2"; shift 2 ;;
    --chunk-delay-ms) delay="$2"; shift 2 ;;
    *) echo "load-scale: unknown flag $1" >&2; exit 2 ;;
  esac
done
case "$store" in off|memory|redis) ;; *) echo "load-scale: --store off|memory|redis" >&2; exit 2 ;; esac

echo "==> cargo build --release (agui-host, examples/load_resume)"
cargo build --release --locked --bin agui-host --example load_resume
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
bin="$target_dir/release/agui-host"
load="$target_dir/release/examples/load_resume"

work="$(mktemp -d)"
started=()
cleanup() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until `$2` succeeds, or fails naming `$1` and printing its log `$3`.
wait_for() {
  local what="$1" check="$2" log="$3"
  for _ in $(seq 1 100); do
    if eval "$check" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "load-scale: $what did not start; its log:" >&2
  cat "$log" >&2
  exit 1
}

"$load" --serve-upstream --chunks "$chunks" --chunk-delay-ms "$delay" >"$work/upstream.log" 2>&1 &
started+=($!)
wait_for "the fake upstream" "grep -q '^upstream ' '$work/upstream.log'" "$work/upstream.log"
upstream="$(sed -n 's/^upstream //p' "$work/upstream.log")"
echo "==> fake upstream: $upstream ($chunks chunks, $delay ms apart)"

redis_flags=()
redis_url=""
if [[ "$store" == redis ]]; then
  command -v redis-server >/dev/null || { echo "load-scale: redis-server is not installed" >&2; exit 1; }
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    >"$work/redis.log" 2>&1 &
  started+=($!)
  redis_flags=(--redis-pid "$!")
  redis_url="redis://127.0.0.1:$redis_port"
  wait_for "redis-server" "redis-cli -p $redis_port ping" "$work/redis.log"
  echo "==> redis-server: $redis_url (pid ${redis_flags[1]})"
fi

urls=() pids=()
for replica in $(seq 1 "$replicas"); do
  port="$(free_port)"
  env APP_SERVER__HOST=127.0.0.1 APP_SERVER__PORT="$port" \
    APP_LLM__PROVIDER=openai OPENAI_BASE_URL="$upstream" OPENAI_API_KEY=load-test \
    APP_LLM__MAX_RETRIES=0 APP_TELEMETRY__LOG_FILTER=warn \
    APP_SERVER__LIMITS__MAX_CONCURRENT_RUNS=$((runs + 64)) \
    APP_SERVER__LIMITS__MAX_CONNECTIONS=$((2 * runs + 64)) \
    APP_THREADS__STORE="$store" ${redis_url:+APP_THREADS__REDIS_URL="$redis_url"} \
    "$bin" serve >"$work/replica$replica.log" 2>&1 &
  started+=($!)
  pids+=("$!")
  urls+=("http://127.0.0.1:$port")
  wait_for "replica $replica" "curl -sf http://127.0.0.1:$port/ready" "$work/replica$replica.log"
  echo "==> replica $replica: http://127.0.0.1:$port (pid $!, threads.store = $store)"
done

echo "==> load"
set +e
"$load" --urls "$(IFS=,; echo "${urls[*]}")" --pids "$(IFS=,; echo "${pids[*]}")" \
  "${redis_flags[@]}" --runs "$runs" --resume-percent "$resume" --chunks "$chunks" \
  --chunk-delay-ms "$delay"
status=$?
set -e
for replica in $(seq 1 "$replicas"); do
  if grep -qiE 'panick|ERROR' "$work/replica$replica.log"; then
    echo "==> replica $replica logged errors:"
    grep -iE 'panick|ERROR' "$work/replica$replica.log" | head -5
  fi
done
exit "$status"
