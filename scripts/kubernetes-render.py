#!/usr/bin/env python3
"""Renders every variant of deploy/kubernetes/ (each directory under overlays/) with
`kubectl kustomize`, validates every object, and the example Secret, against the Kubernetes
OpenAPI schemas offline (kubernetes-validate, strict: an unknown field is an error), and prints
the rendered objects as JSON: {"variants": {name: [object, ...]}, "secret_example": object}.

Validated against the oldest and the newest Kubernetes minor the manifests support. Run it with
the Python of scripts/kubernetes-tools.sh (tests/kubernetes.rs does), which has kubectl,
kubernetes-validate and PyYAML. Exits 1 naming every problem.
"""

import json
import pathlib
import subprocess
import sys

import kubernetes_validate
import yaml

# The Kubernetes minors the manifests must be valid for: the oldest still in wide use, and the
# newest the schemas know.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

root = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
kubectl = pathlib.Path(sys.executable).parent / "kubectl"
problems = []


def validate(what, obj):
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            problems.append(f"{what}: Kubernetes {version}: {path}: {error.message}")
        except Exception as error:  # an unknown kind or apiVersion, a schema it cannot load
            problems.append(f"{what}: Kubernetes {version}: {error}")


def name(obj):
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


variants = {}
for overlay in sorted(path for path in (root / "overlays").iterdir() if path.is_dir()):
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True
    )
    if rendered.returncode != 0:
        problems.append(f"{overlay.name}: kubectl kustomize failed: {rendered.stderr.strip()}")
        continue
    objects = [obj for obj in yaml.safe_load_all(rendered.stdout) if obj is not None]
    for obj in objects:
        validate(f"{overlay.name}: {name(obj)}", obj)
    variants[overlay.name] = objects

secret = yaml.safe_load((root / "base" / "secret.example.yaml").read_text())
validate("base/secret.example.yaml", secret)

if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
json.dump({"variants": variants, "secret_example": secret}, sys.stdout)
