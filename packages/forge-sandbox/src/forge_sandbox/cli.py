"""The `forge-sandbox` command: run, verify, oracle, nop, doctor."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forge_gates import (
    REALREPO,
    GateError,
    quiet_broken_pipe,
    realrepo_split_dir,
    sigterm_as_interrupt,
    use_help_formatter,
)
from forge_sandbox._backends import open_backend
from forge_sandbox._errors import SandboxError, SandboxUnavailableError, TaskLayoutError
from forge_sandbox._job import run_job
from forge_sandbox._spec import SandboxSpec
from forge_sandbox._task import discover_tasks, load_task
from forge_sandbox._trial import reward_of
from forge_sandbox.images._cli import add_parsers as add_images_parsers
from forge_sandbox.images._cli import run_images
from forge_sandbox.local._bwrap import find_tools
from forge_sandbox.local._cgroup_detect import detect_limits
from forge_sandbox.local._doctor import run_doctor
from forge_sandbox.local._sandbox import LocalSandbox
from forge_sandbox.verify._verifier import run_verifier

EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

EPILOG = """\
examples:
  forge-sandbox doctor
  forge-sandbox run --task tasks/fix-add -- python3 -m unittest -q
  forge-sandbox verify tasks/fix-add --workspace /tmp/agent-output
  forge-sandbox oracle tasks/ --out jobs/oracle-1 --concurrency 2
  forge-sandbox nop tasks/ --out jobs/nop-1
  forge-sandbox oracle tasks/ --out jobs/k8s-1 --backend kubernetes --k8s-config k8s.toml
  forge-sandbox oracle tasks/ --out jobs/docker-1 --backend docker   # DOCKER_HOST's daemon
  forge-sandbox docker gc
  forge-sandbox doctor --backend docker
  forge-sandbox k8s render --task tasks/fix-add --trial fix-add__abc1234
  forge-sandbox k8s gc --k8s-config k8s.toml
  forge-sandbox images plan tasks/ --config images.toml --report plan.json
  forge-sandbox images build tasks/ --config images.toml --report images.json
  forge-sandbox images check tasks/ --config images.toml
  forge-sandbox doctor --backend kubernetes --k8s-config k8s.toml --images-config images.toml

exit codes: 0 ok; 1 a job's rewards are not what its agent expects (oracle: all 1, nop: all 0);
2 usage error; 3 isolation missing or an infrastructure error (e.g. VerifierTimeoutError).
`run` exits with the command's own status (124 on timeout, 137 when killed / OOM).
"""


def _limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-mb", type=int, help="memory limit, MiB (default 2048)")
    parser.add_argument("--pids-max", type=int, help="process limit (default 512)")
    parser.add_argument("--cpus", type=float, help="CPU quota in cores (default 1)")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = {"memory_mb": args.memory_mb, "pids_max": args.pids_max, "cpus": args.cpus}
    return {k: v for k, v in names.items() if v is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-sandbox",
        description="Run commands, verifiers and oracle/NOP checks of Harbor-layout tasks in "
        "real sandboxes (bubblewrap + cgroups: no network, private workspace, no capabilities, "
        "memory/pids/CPU limits, clean kill).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one command in a fresh sandbox")
    run.add_argument("--task", type=Path, help="task folder: its environment/workspace is used")
    run.add_argument("--workspace", type=Path, help="folder copied to /workspace (overrides)")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    run.add_argument(
        "--network",
        choices=["none", "host"],
        default="none",
        help="none: no network in the sandbox; host: the host's network",
    )
    _limits(run)
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")

    verify = sub.add_parser("verify", help="run a task's tests/test.sh and print the reward")
    verify.add_argument("task", type=Path, help="task folder (Harbor layout)")
    verify.add_argument("--workspace", type=Path, help="workspace to verify (default: task's)")
    verify.add_argument(
        "--timeout", type=float, help="verifier timeout, s (default: task.toml's, else 180)"
    )
    verify.add_argument("--logs", type=Path, help="copy /logs/verifier here")
    _limits(verify)

    for name, what in (("oracle", "solution/solve.sh"), ("nop", "nothing")):
        job = sub.add_parser(name, help=f"run the {name} agent ({what}) on every task")
        job.add_argument(
            "tasks", type=Path, help="folder of task folders (or one task), or 'realrepo'"
        )
        job.add_argument("--out", type=Path, required=True, help="new Harbor job directory")
        job.add_argument(
            "--resume",
            action="store_true",
            help="continue the job in --out: finished trials are kept, the rest run",
        )
        job.add_argument("--concurrency", type=int, default=2, help="trials at once")
        job.add_argument(
            "--warm",
            type=int,
            default=None,
            help="agent sandboxes started ahead of their turn (default: as many as "
            "--concurrency; 0: none)",
        )
        job.add_argument(
            "--verifier-timeout",
            type=float,
            help="override, s (default: each task.toml's, else 180)",
        )
        job.add_argument(
            "--backend",
            choices=["local", "kubernetes", "docker"],
            default="local",
            help="local: bubblewrap sandboxes; kubernetes: one pod per trial (--k8s-config); "
            "docker: one container per trial on DOCKER_HOST's daemon (--docker-config)",
        )
        job.add_argument("--k8s-config", type=Path, help="KubernetesConfig TOML (kubernetes)")
        job.add_argument("--docker-config", type=Path, help="DockerConfig TOML (docker)")

    doctor = sub.add_parser("doctor", help="what isolation is available here, and why not")
    doctor.add_argument("--json", action="store_true", help="print the probes as JSON")
    doctor.add_argument("--no-live", action="store_true", help="skip starting a real sandbox")
    doctor.add_argument(
        "--backend",
        choices=["local", "kubernetes", "docker"],
        default="local",
        help="which backend",
    )
    doctor.add_argument("--k8s-config", type=Path, help="KubernetesConfig TOML (kubernetes)")
    doctor.add_argument("--images-config", type=Path, help="ImagesConfig TOML: BuildKit, registry")
    _add_k8s_parsers(sub)
    docker = sub.add_parser("docker", help="the Docker backend: gc its containers")
    docker_sub = docker.add_subparsers(
        dest="docker_command", required=True, metavar="DOCKER_COMMAND"
    )
    docker_gc = docker_sub.add_parser("gc", help="remove every container the owner label finds")
    docker_gc.add_argument("--docker-config", type=Path, help="DockerConfig TOML")
    add_images_parsers(sub)
    return use_help_formatter(parser)


def _add_k8s_parsers(sub: Any) -> None:
    """The `k8s` command's parsers: here, not in `forge_sandbox.kubernetes` (which needs the
    `kubernetes` extra), so `--help` works without it; its bodies are kubernetes/_cli.py."""
    k8s = sub.add_parser(
        "k8s", help="the Kubernetes backend: render manifests, gc pods, the seccomp profile"
    )
    k8s_sub = k8s.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")
    render = k8s_sub.add_parser("render", help="print the manifests (YAML) a trial would create")
    render.add_argument("--task", type=Path, required=True, help="task folder")
    render.add_argument("--trial", required=True, help="trial name (the pod name derives from it)")
    render.add_argument("--image", help="image reference (default: from the config's images)")
    gc = k8s_sub.add_parser("gc", help="delete every pod and policy the label selector finds")
    seccomp = k8s_sub.add_parser(
        "seccomp",
        help="print Forge's seccomp profile (JSON: <seccomp root>/forge/seccomp.json on every "
        "node), or with --daemonset the manifests that install it (| kubectl apply -f -)",
    )
    seccomp.add_argument(
        "--daemonset", action="store_true", help="print a ConfigMap + DaemonSet installing it"
    )
    seccomp.add_argument(
        "--namespace", help="the DaemonSet's namespace (default kube-system: it uses hostPath)"
    )
    seccomp.add_argument("--image", help="installer image with sh (default busybox:1.36)")
    seccomp.add_argument(
        "--seccomp-root", help="the kubelet's seccomp root (default /var/lib/kubelet/seccomp)"
    )
    for parser in (render, gc):
        parser.add_argument("--k8s-config", type=Path, help="KubernetesConfig TOML")


async def _run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("forge-sandbox run: expected -- COMMAND [ARGS...]; found none", file=sys.stderr)
        return EXIT_USAGE
    fields = {"network": args.network, **_overrides(args)}
    if args.task is not None:
        spec = load_task(args.task).sandbox_spec(args.workspace, **fields)
    else:
        spec = SandboxSpec(workspace=args.workspace, **fields)
    async with LocalSandbox(spec) as sandbox:
        result = await sandbox.exec(cmd, timeout_s=args.timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.timed_out or result.oom_killed:
        what = "timed out" if result.timed_out else "was OOM-killed"
        print(f"forge-sandbox: the command {what}", file=sys.stderr)
    return result.exit_code


async def _verify(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    spec = task.sandbox_spec(args.workspace, **_overrides(args))
    async with LocalSandbox(spec) as sandbox:
        result = await run_verifier(sandbox, task, timeout_s=args.timeout, logs_dir=args.logs)
    summary = {"task": task.name, "reward": result.reward, "rewards": result.rewards}
    summary |= {"exit_code": result.exit_code, "duration_s": round(result.duration_s, 3)}
    print(json.dumps(summary))
    return EXIT_OK


def tasks_folder(tasks: Path) -> Path:
    """The tasks argument: a folder, or `realrepo` (the real-repository tier where forge-data
    built it: `forge_gates.realrepo_split_dir()`)."""
    if str(tasks) != REALREPO or tasks.exists():
        return tasks
    folder = realrepo_split_dir() / "tasks"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"tasks 'realrepo': expected the real-repository tier's task folders in {folder}; "
            "found none; fix: forge-data realrepo build (or nox -s synth), or set "
            "FORGE_REALREPO / FORGE_CACHE to where it was built"
        )
    return folder


def _job(args: argparse.Namespace) -> int:
    args.tasks = tasks_folder(args.tasks)
    tasks = discover_tasks(args.tasks, keep_unreadable=True)  # a bad one fails its own trial
    for unreadable in (t for t in tasks if t.problem is not None):
        print(
            f"forge-sandbox {args.command}: {unreadable.name}: {unreadable.problem}",
            file=sys.stderr,
        )
    if args.backend == "local":
        find_tools()  # preflight: fail once, with the install command, before any trial
        detect_limits()  # cgroups; rlimits for a user other than root without one
    if args.backend == "docker":
        backend = open_backend("docker", config=args.docker_config, tasks=tasks)
    else:
        backend = open_backend(args.backend, config=args.k8s_config)
    started = time.monotonic()
    print(
        f"forge-sandbox {args.command}: {len(tasks)} task(s) -> {args.out} "
        f"(concurrency {args.concurrency})",
        file=sys.stderr,
    )

    def progress(done: int, total: int, result: dict[str, Any]) -> None:
        rewards = (result["verifier_result"] or {}).get("rewards")
        error = result["exception_info"]
        status = f"reward={reward_of(rewards)}" if rewards is not None else "no reward"
        if error is not None:
            status += f" ERROR {error['exception_type']}"
        elapsed = time.monotonic() - started
        width = len(str(total))
        line = f"[{done:>{width}}/{total}] {result['task_name']:<32} {status} ({elapsed:.1f}s)"
        print(line, file=sys.stderr, flush=True)

    with sigterm_as_interrupt() as interrupt:  # Ctrl-C or SIGTERM: every sandbox stopped
        try:
            summary = asyncio.run(
                run_job(
                    tasks,
                    args.out,
                    args.command,
                    concurrency=args.concurrency,
                    warm=args.warm,
                    resume=args.resume,
                    verifier_timeout_s=args.verifier_timeout,
                    make_sandbox=backend,
                    progress=progress,
                )
            )
        except KeyboardInterrupt:
            print(
                f"forge-sandbox {args.command}: interrupted by {interrupt.name}: sandboxes "
                f"stopped; finished trials are kept in {args.out}",
                file=sys.stderr,
            )
            return interrupt.exit_code
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()
    want = 1.0 if args.command == "oracle" else 0.0
    unexpected = [t for t, r in summary.rewards.items() if r != want and t not in summary.errors]
    print(
        f"forge-sandbox {args.command}: {len(tasks)} trial(s), "
        f"{len(tasks) - len(unexpected) - len(summary.errors)} as expected (reward {want:g}), "
        f"{len(unexpected)} not, {len(summary.errors)} errored; job: {args.out}",
        file=sys.stderr,
    )
    for task in unexpected:
        print(f"  unexpected reward {summary.rewards[task]}: {task}", file=sys.stderr)
    for task, kind in summary.errors.items():
        print(f"  {kind}: {task}", file=sys.stderr)
    if summary.errors:
        return EXIT_INFRA
    return EXIT_OK if summary.as_expected else EXIT_UNEXPECTED


def _doctor(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        # the optional `kubernetes` extra: imported only when a Kubernetes command runs
        from forge_sandbox.kubernetes._cli import run_k8s_doctor_cli

        probes = run_k8s_doctor_cli(args)
    elif args.backend == "docker":
        from forge_sandbox.docker._cli import run_docker_doctor_cli  # the extra, only when asked

        probes = run_docker_doctor_cli(args)
    else:
        probes = run_doctor(live=not args.no_live)
    if args.json:
        print(json.dumps([p.model_dump() for p in probes], indent=2))
    else:
        print("forge-sandbox doctor")
        for probe in probes:
            mark = "ok" if probe.ok else ("MISSING" if probe.required else "warn")
            print(f"  [{mark:^7}] {probe.name:<22} {probe.found}")
            if not probe.ok and probe.fix:
                print(f"  {'':9} {'':<22} fix: {probe.fix}")
    return EXIT_OK if all(p.ok for p in probes if p.required) else EXIT_INFRA


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `forge-sandbox`; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return asyncio.run(_run(args))
        if args.command == "verify":
            return asyncio.run(_verify(args))
        if args.command in ("oracle", "nop"):
            return _job(args)
        if args.command == "k8s":
            from forge_sandbox.kubernetes._cli import run_k8s  # the extra, only when asked

            return run_k8s(args)
        if args.command == "docker":
            from forge_sandbox.docker._cli import run_docker  # the extra, only when asked

            return run_docker(args)
        if args.command == "images":
            return run_images(args)
        return _doctor(args)
    except (SandboxUnavailableError, GateError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INFRA
    except TaskLayoutError as exc:
        print(f"forge-sandbox: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SandboxError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INFRA
    except (FileExistsError, FileNotFoundError) as exc:
        print(f"forge-sandbox: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
