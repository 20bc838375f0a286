"""`forge-rollout run`: agent episodes on tasks through the gateway into a Harbor job folder."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from forge_gates import GateError, sigterm_as_interrupt
from forge_rollout.episodes._agent import AgentConfig, NetworkConnectionError
from forge_rollout.episodes._audit import audit_job
from forge_rollout.episodes._runner import resolve_tasks, run_rollouts, select_tasks
from forge_sandbox import SandboxError, SandboxFactory, open_backend

BACKENDS = ("local", "docker", "kubernetes")  # forge_sandbox.open_backend's names
EXIT_INFRA = 3  # forge-sandbox's: the sandboxes could not be had


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="mini-swe-agent episodes on tasks -> a Harbor job folder")
    p.add_argument(
        "--tasks",
        required=True,
        help="demo | demo:SPLIT | a task folder | a folder of tasks | SPLIT_DIR:SPLIT",
    )
    p.add_argument("--task-root", type=Path, help="task folders of a SPLIT_DIR:SPLIT reference")
    p.add_argument("--task-ids", nargs="*", help="only these task ids (unknown ids are errors)")
    p.add_argument("--endpoint", required=True, help="gateway base URL, e.g. http://127.0.0.1:9000")
    p.add_argument("--traces", type=Path, help="the gateway's traces folder (copied per trial)")
    p.add_argument("--out", type=Path, required=True, help="job folder (rerun resumes it)")
    p.add_argument("--attempts", type=int, default=1, help="episodes per task")
    p.add_argument("--concurrency", type=int, default=2, help="episodes at the same time")
    p.add_argument(
        "--warm",
        type=int,
        default=None,
        help="agent sandboxes started ahead of their turn (default: as many as --concurrency; "
        "0: none)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="served model name or LoRA adapter name (default: the endpoint's only model, "
        "from /v1/models; with several, name one)",
    )
    p.add_argument("--step-limit", type=int, default=4, help="agent model calls (200: production)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--top-p", type=float, default=None, help="top-p (default: the server's)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="tokens per model call (default: no limit)"
    )
    p.add_argument("--command-timeout", type=float, default=20.0, help="seconds per command")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="where the agent's commands run: local (bubblewrap), docker (one container per "
        "episode on DOCKER_HOST's daemon, --docker-config) or kubernetes (one pod per episode, "
        "--k8s-config)",
    )
    p.add_argument("--docker-config", type=Path, help="DockerConfig TOML (--backend docker)")
    p.add_argument("--k8s-config", type=Path, help="KubernetesConfig TOML (--backend kubernetes)")
    p.add_argument(
        "--production-templates",
        action="store_true",
        help="mini-swe-agent's own text-based templates instead of the compact ones",
    )
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    # 1. the tasks and the agent settings (bad input fails before anything starts)
    try:
        tasks = select_tasks(resolve_tasks(args.tasks, args.task_root), args.task_ids)
    except (KeyError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings = {
        "step_limit": args.step_limit,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_tokens": args.max_tokens,
        "command_timeout_s": args.command_timeout,
    }
    config = (
        AgentConfig.production(**settings) if args.production_templates else AgentConfig(**settings)
    )

    def progress(done: int, total: int, result: dict[str, Any]) -> None:
        reward = (result.get("verifier_result") or {}).get("rewards")
        error = (result.get("exception_info") or {}).get("exception_type") or ""
        print(
            f"[{done}/{total}] {result['trial_name']} rewards={reward} {error}".rstrip(),
            file=sys.stderr,
            flush=True,
        )

    # 2. the sandboxes of --backend (a missing extra, daemon or config fails here, with the fix)
    try:
        make_sandbox = open_sandboxes(args, tasks)
    except (GateError, SandboxError, ValueError, TypeError, OSError) as error:
        print(f"error: --backend {args.backend}: {error}", file=sys.stderr)
        return EXIT_INFRA
    # 3. the episodes (Ctrl-C or SIGTERM stops every sandbox; rerunning resumes)
    with sigterm_as_interrupt() as interrupt:
        try:
            summary = _run(tasks, args, config, progress, make_sandbox)
        except NetworkConnectionError as error:
            print(f"NetworkConnectionError: {error}", file=sys.stderr)
            return 1
        except (ValueError, FileExistsError) as error:  # no model to choose; another job's
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                f"interrupted by {interrupt.name}: sandboxes stopped; rerun the same command to "
                "resume",
                file=sys.stderr,
            )
            return interrupt.exit_code
        finally:
            close = getattr(make_sandbox, "close", None)
            if callable(close):
                close()  # the Docker / Kubernetes clients; local has none
    return _verdict(args, summary)


def open_sandboxes(args: argparse.Namespace, tasks: Any) -> SandboxFactory:
    """`--backend`'s SandboxFactory: local, docker (the tasks give the images; `--docker-config`
    else $FORGE_DOCKER_CONFIG) or kubernetes (`--k8s-config` else $FORGE_KUBERNETES_CONFIG)."""
    if args.backend == "docker":
        backend = open_backend("docker", config=args.docker_config, tasks=tasks)
        getattr(backend, "api")  # noqa: B009  connects now: no daemon fails before any episode
        return backend
    if args.backend == "kubernetes":
        return open_backend("kubernetes", config=args.k8s_config)
    return open_backend("local")


def _run(
    tasks: Any,
    args: argparse.Namespace,
    config: AgentConfig,
    progress: Any,
    make_sandbox: SandboxFactory,
) -> Any:
    return asyncio.run(
        run_rollouts(
            tasks,
            args.out,
            endpoint=args.endpoint,
            model=args.model,
            config=config,
            attempts=args.attempts,
            concurrency=args.concurrency,
            warm=args.warm,
            traces_dir=args.traces,
            progress=progress,
            make_sandbox=make_sandbox,
        )
    )


def _verdict(args: argparse.Namespace, summary: Any) -> int:
    # 4. the verdict: a job whose every trial is an infrastructure error measured nothing
    solved = sum(1 for r in summary.rewards.values() if r is not None and r >= 1)
    infra = [key for key, reward in summary.rewards.items() if reward is None]
    audit = audit_job(args.out)  # what the agent ran that a fix never needs (hack-audit.json)
    print(
        f"JOB {args.out} trials={len(summary.rewards)} solved={solved} "
        f"errors={len(summary.errors)} infrastructure_errors={len(infra)} "
        f"hack_audit_flagged={audit['flagged']}"
    )
    if summary.rewards and len(infra) == len(summary.rewards):
        print(
            f"error: every trial of {args.out} is an infrastructure error (no reward); the "
            f"first: {_first_error(args.out)}; fix: check the model name (--model) and the "
            "endpoint, then rerun into a new --out folder",
            file=sys.stderr,
        )
        return 1
    return 0


def _first_error(job_dir: Path) -> str:
    """`ExceptionType: message` of the first errored trial of a job folder (by start time)."""
    found = []
    for path in job_dir.glob("*/result.json"):
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        info = result.get("exception_info") or {}
        if info.get("exception_type"):
            message = str(info.get("exception_message") or "").strip().splitlines()
            text = f"{info['exception_type']}: {message[0] if message else ''}".rstrip(": ")
            found.append((str(result.get("started_at") or ""), text))
    return min(found)[1] if found else "no exception recorded"
