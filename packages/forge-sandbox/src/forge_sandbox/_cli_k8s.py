"""`forge-sandbox k8s render|gc` and `forge-sandbox images plan|build|check`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from forge_gates import atomic_write_json
from forge_sandbox._task import discover_tasks, load_task
from forge_sandbox.images import ImagesConfig, Registry, build_images, check_images, plan_images


def add_parsers(sub: Any) -> None:
    k8s = sub.add_parser("k8s", help="the Kubernetes backend: render manifests, gc pods")
    k8s_sub = k8s.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")
    render = k8s_sub.add_parser("render", help="print the manifests (YAML) a trial would create")
    render.add_argument("--task", type=Path, required=True, help="task folder")
    render.add_argument("--trial", required=True, help="trial name (the pod name derives from it)")
    render.add_argument("--image", help="image reference (default: from the config's images)")
    gc = k8s_sub.add_parser("gc", help="delete every pod and policy the label selector finds")
    for parser in (render, gc):
        parser.add_argument("--k8s-config", type=Path, help="KubernetesConfig TOML")

    images = sub.add_parser("images", help="task images: plan, build (BuildKit), check")
    images_sub = images.add_subparsers(
        dest="images_command", required=True, metavar="IMAGES_COMMAND"
    )
    for name, what in (
        ("plan", "rewrite bases, shard, tag, project the tag quota"),
        ("build", "plan, then buildctl build + push each missing image"),
        ("check", "plan, then a manifest HEAD per image (digest)"),
    ):
        parser = images_sub.add_parser(name, help=what)
        parser.add_argument("tasks", type=Path, help="folder of task folders (or one task)")
        parser.add_argument("--config", type=Path, help="ImagesConfig TOML")
        parser.add_argument("--report", type=Path, help="write the JSON report here (atomic)")
        parser.add_argument(
            "--offline",
            action="store_true",
            help="plan without asking the registry for existing tags",
        )


def _progress(command: str) -> Any:
    started = time.monotonic()

    def show(done: int, total: int, text: str) -> None:
        width = len(str(total))
        elapsed = time.monotonic() - started
        print(
            f"[{done:>{width}}/{total}] {command} {text} ({elapsed:.1f}s)",
            file=sys.stderr,
            flush=True,
        )

    return show


def run_k8s(args: argparse.Namespace) -> int:
    # the optional `kubernetes` extra: imported only when a k8s command runs
    from forge_sandbox.kubernetes import KubernetesBackend, KubernetesConfig, render_yaml

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


def run_images(args: argparse.Namespace) -> int:
    config = ImagesConfig.load(args.config)
    tasks = discover_tasks(args.tasks)
    registry = Registry(config)
    plan = plan_images(tasks, config, None if args.offline else registry.tags)
    show = _progress(args.images_command)
    report: dict[str, Any]
    if args.images_command == "plan":
        for number, row in enumerate(plan.rows, 1):
            show(
                number,
                len(plan.rows),
                f"{row.task}: {row.image}" + (" (exists)" if row.exists else ""),
            )
        report = plan.model_dump(mode="json")
        failed = 0
    elif args.images_command == "build":
        report = build_images(plan, config, show, lambda line: None)
        failed = sum(1 for r in report["images"] if r["status"] == "failed")
    else:
        report = check_images(plan, config, show)
        failed = sum(1 for r in report["images"] if r["status"] != "present")
    if args.report is not None:
        atomic_write_json(args.report, report)
    print(
        json.dumps(
            report
            if args.images_command != "plan"
            else {"rows": len(plan.rows), "projected": plan.projected},
            indent=1,
        )
    )
    if failed:
        print(
            f"forge-sandbox images {args.images_command}: {failed} of {len(plan.rows)} "
            "image(s) not ok (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0


def run_k8s_doctor_cli(args: argparse.Namespace) -> list[Any]:
    from forge_sandbox.kubernetes import KubernetesConfig, run_k8s_doctor  # the extra

    images = ImagesConfig.load(args.images_config) if args.images_config else None
    return run_k8s_doctor(KubernetesConfig.load(args.k8s_config), images)
