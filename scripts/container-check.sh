#!/usr/bin/env bash
# Builds the container image with podman and checks it the way an orchestrator and a client
# would: environment-only configuration, /health, /ready, /metrics, the image's HEALTHCHECK, one
# run through the published port, a clean stop on SIGTERM. Then prints the image size and
# removes the container and the image it made (the cargo cache mounts stay, so the next build is
# fast). Also validates docker-compose.yml.
#
# Needs root and podman. On a machine with no registry, the local base images are made first by
# ../shared/tools/container/local-base-images.sh (beside the repository), skipped when they
# already exist. Idempotent; run by .ci/run.
set -euo pipefail

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))
cd "$repo"

IMAGE=localhost/agui-host:ci
TOKEN=ci-check-token
t0=$SECONDS
step() { printf '\n--> [%ss] %s\n' "$((SECONDS - t0))" "$*"; }
fail() { printf 'container check FAILED: %s\n' "$*" >&2; exit 1; }

rust_version=$(rustc --version | awk '{print $2}')
rust_image="localhost/rust:${rust_version%.*}-slim-bookworm"
base_image=localhost/debian:bookworm-slim

step "local base images"
if command -v podman >/dev/null && command -v docker-compose >/dev/null \
    && podman image exists "$base_image" && podman image exists "$rust_image"; then
    echo "present: $base_image $rust_image"
else
    base_script="$repo/../shared/tools/container/local-base-images.sh"
    [ -f "$base_script" ] || fail "no podman base images and no $base_script to make them"
    bash "$base_script"
fi
command -v curl >/dev/null || fail "curl is needed"

cid=""
build_log=$(mktemp)
cleanup() {
    rm -f "$build_log"
    if [ -n "$cid" ]; then
        podman rm -f "$cid" >/dev/null 2>&1 || true
    fi
    # Only the image this script made (built without intermediate images, see below).
    podman rmi "$IMAGE" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "docker-compose.yml"
scripts/compose-check.sh

step "build $IMAGE"
build_start=$SECONDS
# --layers=false: no intermediate images pile up, one per source change, on a machine that runs
# this again and again. What makes a rebuild fast is the Dockerfile's cargo cache mounts, which
# persist anyway: with unchanged sources the whole build takes seconds.
podman build --pull=never --format docker --layers=false \
    --build-arg RUST_IMAGE="$rust_image" \
    --build-arg RUNTIME_IMAGE="$base_image" \
    -t "$IMAGE" . >"$build_log" 2>&1 \
    || { tail -40 "$build_log"; fail "podman build"; }
build_secs=$((SECONDS - build_start))
grep -E 'Finished|Compiling agui-host' "$build_log" || true
echo "built in ${build_secs}s"

step "OCI labels"
crate_version=$(sed -nE 's/^version = "([^"]+)"$/\1/p' Cargo.toml | head -n1)
label_version=$(podman image inspect --format '{{ index .Labels "org.opencontainers.image.version" }}' "$IMAGE")
[ "$label_version" = "$crate_version" ] \
    || fail "the image's org.opencontainers.image.version is '$label_version', the crate's $crate_version"
echo "org.opencontainers.image.version=$label_version"

step "run with environment-only configuration"
# Port 0 on the host side: podman picks a free loopback port.
cid=$(podman run -d -p 127.0.0.1::8080 \
    -e APP_LLM__PROVIDER=offline \
    -e APP_SERVER__AUTH__TOKENS="$TOKEN" \
    -e APP_METRICS__REQUIRE_AUTH=false \
    -e APP_SERVER__SHUTDOWN_GRACE_SECS=5 \
    "$IMAGE" 2>/dev/null)
port=$(podman port "$cid" 8080 | head -n1 | awk -F: '{print $NF}')
[ -n "$port" ] || fail "no published port"
base="http://127.0.0.1:$port"
for _ in $(seq 1 50); do
    curl -fsS "$base/health" >/dev/null 2>&1 && break
    sleep 0.2
done

step "probes and metrics on $base"
# Bodies are read into variables before grep: `curl | grep -q` can fail under pipefail when
# grep exits before curl has written everything.
health=$(curl -fsS "$base/health") && grep -q '"ok"' <<<"$health" || fail "/health: $health"
ready=$(curl -fsS "$base/ready") && grep -q '"ready"' <<<"$ready" || fail "/ready: $ready"
podman healthcheck run "$cid" 2>/dev/null || fail "podman healthcheck run"
echo "health, ready, HEALTHCHECK: ok"
uid=$(podman exec "$cid" id -u)
[ "$uid" != 0 ] || fail "the service runs as root"
podman exec "$cid" test -s /etc/ssl/certs/ca-certificates.crt || fail "no CA bundle in the image"
echo "runs as uid $uid; CA bundle present"

step "one run through the container's port"
status=$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$base/" -d '{"messages":[]}')
[ "$status" = 401 ] || fail "a run without a token got $status, not 401"
stream=$(curl -fsS -N -X POST "$base/" \
    -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    -d '{"threadId":"t1","runId":"r1","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"Hi there!"}]}')
grep -q '"type":"RUN_STARTED"' <<<"$stream" || fail "no RUN_STARTED: $stream"
last_event=$(grep '^data: ' <<<"$stream" | tail -n1)
grep -q '"type":"RUN_FINISHED"' <<<"$last_event" \
    || fail "the stream does not end with RUN_FINISHED: $stream"
echo "$(grep -c '^data: ' <<<"$stream") events, ending with RUN_FINISHED"
metrics=$(curl -fsS "$base/metrics")
grep -q 'agui_runs_finished_total{agent="assistant",outcome="success"} 1' <<<"$metrics" \
    || fail "/metrics did not count the run: $metrics"
grep -q 'agui_requests_rejected_total{code="missing_token",status="401"} 1' <<<"$metrics" \
    || fail "/metrics did not count the 401"
echo "metrics counted the run and the refusal"

step "stop (SIGTERM)"
stop_start=$SECONDS
podman stop -t 20 "$cid" >/dev/null 2>&1
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$cid")
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM"
logs=$(podman logs "$cid" 2>&1)
grep -q 'shutting down' <<<"$logs" || fail "no graceful shutdown in the log: $logs"
echo "stopped cleanly in $((SECONDS - stop_start))s"

step "sizes"
image_bytes=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_bytes=$(podman image inspect --format '{{.Size}}' "$base_image")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
echo "image $IMAGE: $(mb "$image_bytes")"
echo "runtime stage over $base_image: $(mb $((image_bytes - base_bytes)))"
[ $((image_bytes - base_bytes)) -lt 30000000 ] || fail "the runtime stage adds 30 MB or more"

step "container check passed in $((SECONDS - t0))s (build ${build_secs}s)"
