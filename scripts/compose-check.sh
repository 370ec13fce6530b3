#!/usr/bin/env bash
# Checks docker-compose.yml as a fresh clone has it: `config` must pass with no .env file (no
# manual step before `docker compose up`), and every variable .env.example documents (set or
# commented out) must be passed to the container, so a setting added there reaches it, and so
# must every OpenTelemetry variable docs/observability.md documents. The
# same for its `scale` profile (Redis) and for docker-compose.scale.yml (replicas sharing
# Redis behind a proxy), whose replicas must use the Redis store and whose proxy must not
# buffer.
#
# Uses the first of `docker compose`, docker-compose and podman-compose that is installed; exits
# 0 with a note when none is. Runs from scripts/test.sh and scripts/container-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose=(docker-compose)
elif command -v podman-compose >/dev/null; then
    compose=(podman-compose)
else
    echo "compose check: skipped (no docker compose, docker-compose or podman-compose)"
    exit 0
fi

# A directory with the compose files and nothing else: no .env, whatever this checkout has.
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
cp docker-compose.yml docker-compose.scale.yml "$fresh/"
mkdir -p "$fresh/deploy"
cp deploy/nginx-scale.conf "$fresh/deploy/"

# `config` of one file (and profile) with no .env and none of this shell's variables.
compose_config() {
    (cd "$fresh" && env -i PATH="$PATH" HOME="${HOME:-/root}" "${compose[@]}" "$@" config)
}

# Every variable .env.example documents, passed to the containers of that configuration.
check_variables() {
    local what="$1" config="$2" missing=()
    while read -r name; do
        grep -Eq "^ +${name}:" <<<"$config" || missing+=("$name")
    done < <(grep -Eo '^(# ?)?[A-Z][A-Z0-9_]*=' .env.example | sed -E 's/^# ?//; s/=$//' | sort -u)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "compose check FAILED: .env.example documents variables $what does not pass" \
            "to the container (add them to its environment): ${missing[*]}" >&2
        exit 1
    fi
}

fail() {
    echo "compose check FAILED: $*" >&2
    exit 1
}

# Every OpenTelemetry variable docs/observability.md's table documents, passed to the
# containers of that configuration: a sampling ratio or an exporter header set in .env must
# not be silently dropped.
check_otel_variables() {
    local what="$1" config="$2" missing=() names
    names=$(grep -E '^\| `OTEL_' docs/observability.md | grep -oE 'OTEL_[A-Z0-9_]*[A-Z0-9]' | sort -u)
    [ -n "$names" ] || fail "docs/observability.md lists no OTEL_ variable"
    while read -r name; do
        grep -Eq "^ +${name}:" <<<"$config" || missing+=("$name")
    done <<<"$names"
    if [ ${#missing[@]} -gt 0 ]; then
        fail "$what does not pass the OpenTelemetry variables docs/observability.md documents" \
            "(add them to its environment): ${missing[*]}"
    fi
}

config=$(compose_config) || fail "\`${compose[*]} config\` with no .env"
check_variables docker-compose.yml "$config"
check_otel_variables docker-compose.yml "$config"

scale_profile=$(compose_config --profile scale) \
    || fail "\`${compose[*]} --profile scale config\` with no .env"
grep -Eq '^  redis:' <<<"$scale_profile" || fail "the scale profile has no redis service"

scale=$(compose_config -f docker-compose.scale.yml) \
    || fail "\`${compose[*]} -f docker-compose.scale.yml config\` with no .env"
check_variables docker-compose.scale.yml "$scale"
check_otel_variables docker-compose.scale.yml "$scale"
for service in agui-host-1 agui-host-2 proxy redis; do
    grep -Eq "^  ${service}:" <<<"$scale" || fail "docker-compose.scale.yml has no $service service"
done
[ "$(grep -Ec '^ +APP_THREADS__STORE: redis$' <<<"$scale")" -eq 2 ] \
    || fail "both replicas of docker-compose.scale.yml must use threads.store = redis"
[ "$(grep -Ec '^ +APP_THREADS__REDIS_URL: redis://redis:6379$' <<<"$scale")" -eq 2 ] \
    || fail "both replicas of docker-compose.scale.yml must use the redis service"
for directive in 'proxy_buffering off' 'proxy_read_timeout 1h' 'server agui-host-1:8080' \
    'server agui-host-2:8080'; do
    grep -q "$directive" deploy/nginx-scale.conf || fail "deploy/nginx-scale.conf lacks \`$directive\`"
done
if grep -Eq '^\s*(ip_hash|hash|sticky)' deploy/nginx-scale.conf; then
    fail "deploy/nginx-scale.conf must not pin clients to a replica"
fi

echo "compose check: \`${compose[*]} config\` passes with no .env for docker-compose.yml, its" \
    "scale profile and docker-compose.scale.yml; every .env.example and OTEL_ variable is passed"
