#!/usr/bin/env bash
# Checks docker-compose.yml as a fresh clone has it: `config` must pass with no .env file (no
# manual step before `docker compose up`), and every variable .env.example documents (set or
# commented out) must be passed to the container, so a setting added there reaches it.
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

# A directory with the compose file and nothing else: no .env, whatever this checkout has.
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
cp docker-compose.yml "$fresh/"
# The variables of this shell must not stand in for a missing .env either.
config=$(cd "$fresh" && env -i PATH="$PATH" HOME="${HOME:-/root}" "${compose[@]}" config) || {
    echo "compose check FAILED: \`${compose[*]} config\` with no .env" >&2
    exit 1
}

missing=()
while read -r name; do
    grep -Eq "^ +${name}:" <<<"$config" || missing+=("$name")
done < <(grep -Eo '^(# ?)?[A-Z][A-Z0-9_]*=' .env.example | sed -E 's/^# ?//; s/=$//' | sort -u)
if [ ${#missing[@]} -gt 0 ]; then
    echo "compose check FAILED: .env.example documents variables docker-compose.yml does not pass" \
        "to the container (add them under services.agui-host.environment): ${missing[*]}" >&2
    exit 1
fi
echo "compose check: \`${compose[*]} config\` passes with no .env; every .env.example variable is passed"
