"""`forge-sandbox k8s render|gc|seccomp`, `forge-sandbox doctor --backend kubernetes`: bodies.

`forge_sandbox.cli` imports this module only when such a command runs (this subpackage needs
the `kubernetes` extra); the `k8s` argument parsers stay in `cli.py`, so `forge-sandbox --help`
works without the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from forge_sandbox._task import load_task
from forge_sandbox.images import ImagesConfig
from forge_sandbox.kubernetes._backend import KubernetesBackend
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._doctor import run_k8s_doctor
from forge_sandbox.kubernetes._manifests import render_yaml
from forge_sandbox.kubernetes._seccomp import (
    INSTALLER_IMAGE,
    INSTALLER_NAMESPACE,
    seccomp_installer_yaml,
)
from forge_sandbox.seccomp import KUBELET_SECCOMP_ROOT, profile_json


def run_k8s(args: argparse.Namespace) -> int:
    if args.k8s_command == "seccomp":  # needs no cluster and no config
        return run_k8s_seccomp(args)
    config = KubernetesConfig.load(args.k8s_config)
    if args.k8s_command == "render":
        task = load_task(args.task)
        spec = task.sandbox_spec(trial_name=args.trial)
        image = args.image or KubernetesBackend(config).image_for(spec)
        print(render_yaml(spec, config, image), end="")
        return 0
    backend = KubernetesBackend(config)
    try:
        removed = asyncio.run(backend.gc())
    finally:
        backend.close()
    print(json.dumps({"namespace": config.namespace, "removed": removed}))
    return 0


def run_k8s_seccomp(args: argparse.Namespace) -> int:
    """Print Forge's seccomp profile (JSON, for <seccomp root>/forge/seccomp.json on each
    node), or with --daemonset the ConfigMap + DaemonSet that install it on every node."""
    if not args.daemonset:
        print(profile_json(indent=2), end="")
        return 0
    print(
        seccomp_installer_yaml(
            args.namespace or INSTALLER_NAMESPACE,
            args.image or INSTALLER_IMAGE,
            args.seccomp_root or KUBELET_SECCOMP_ROOT,
        ),
        end="",
    )
    return 0


def run_k8s_doctor_cli(args: argparse.Namespace) -> list[Any]:
    images = ImagesConfig.load(args.images_config) if args.images_config else None
    return run_k8s_doctor(KubernetesConfig.load(args.k8s_config), images)
