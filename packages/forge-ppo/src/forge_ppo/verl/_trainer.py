"""The verl trainer: verl 0.9.1's FSDP2 LoRA actor and critic as Ray worker groups, driven the
way verl's own `trainer/ppo/ray_trainer.py` drives them (old log-probs, values, advantages,
critic update, actor update), behind Forge's `Trainer` protocol.

verl's full trainer entry point is not used: it insists on building its own rollout replicas
(`ray_trainer.py:950`). Forge keeps its own episodes and inference server; this class only
trains. It keeps a host mirror of the weights (a PEFT actor and a `ValueModel` on the driver,
built and warm-started exactly as the local trainer builds them) because Forge's checkpoint
layout, adapter export and update proof work on those: after each update the adapter and critic
tensors are gathered from the ranks into the mirror.

    trainer = VerlTrainer(spec, model_dir, run_dir)   # Ray up, workers built, weights checked
    result = trainer.update(rows, step=1, episodes=None)
    trainer.save(run_dir / "checkpoints", step=1, record=result.record, run_dir=run_dir)
    trainer.close()                                   # workers and a Ray we started: stopped
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from math import lcm
from pathlib import Path
from typing import Any

import ray
import torch
from peft import set_peft_model_state_dict
from verl import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import TrainingWorkerConfig
from verl.workers.utils.losses import value_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from forge_gates import (
    Check,
    Gate,
    GateError,
    ProcessPeak,
    RunSpec,
    Violation,
    gate,
    write_process_peaks,
)
from forge_ppo._protocol import ModelSettings, TokenBudgets, TrainerSettings, UpdateResult
from forge_ppo.algo._batch import assert_finite_metrics, split_rows
from forge_ppo.algo._errors import PPOInputError
from forge_ppo.algo._gae import compute_gae, masked_whiten
from forge_ppo.algo._metrics import PhaseTimer
from forge_ppo.algo._observability import EpisodeOutcome
from forge_ppo.checkpoint._adapter import adapter_state_dict, tensor_fingerprint
from forge_ppo.checkpoint._save import save_run_checkpoint
from forge_ppo.checkpoint._update import UpdateRecord, UpdateTracker
from forge_ppo.policy._build import build_models
from forge_ppo.policy._update_metrics import batch_metrics, critic_metrics, episode_outcomes
from forge_ppo.verl._compose import compose
from forge_ppo.verl._config import VerlTopology
from forge_ppo.verl._critic import critic_folder, from_verl_critic, to_verl_critic
from forge_ppo.verl._data import rows_to_tensors
from forge_ppo.verl._platform import ENV, NAME, cpu_requested, ensure_registered
from forge_ppo.verl._ray import RayCluster, start_ray
from forge_ppo.verl._workers import ForgeActorWorker, ForgeCriticWorker
from forge_rollout.rows import SampleRow

WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def rank_threads(world_size: int, ray_address: str | None) -> str | None:
    """OMP_NUM_THREADS for each CPU rank on a cluster Forge starts here: this host's cores
    shared out among the ranks (an explicit OMP_NUM_THREADS is passed on as it is, OpenMP's
    list syntax included). Ray sets none for these workers, so without it every rank runs one
    thread per core: 2 ranks on 2 cores ran 4 compute threads (the bench's update: 2.2 s,
    against 1.9 s with one thread per rank). None when joining a cluster (its nodes decide)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return os.environ["OMP_NUM_THREADS"]
    if ray_address:
        return None
    return str(max(len(os.sched_getaffinity(0)) // max(world_size, 1), 1))


class VerlWorkerError(RuntimeError):
    """A verl worker died or failed during an update (the update is not applied)."""


class VerlTrainer:
    """Forge's `Trainer` on verl worker groups (actor + critic colocated on the trainer ranks)."""

    def __init__(self, spec: RunSpec, model_dir: Path, run_dir: Path) -> None:
        if spec.ppo is None:
            raise PPOInputError(
                "spec.ppo",
                expected="PPO settings ([ppo] table)",
                found=f"none in config {spec.name!r}",
                fix="train with a smoke / soak / formal config",
            )
        self.spec, self.ppo, self.run_dir = spec, spec.ppo, run_dir
        self.topology = VerlTopology.from_spec(spec)
        self._cluster: RayCluster | None = None
        self._groups: dict[str, RayWorkerGroup] = {}
        if (self.topology.device == "cpu") != cpu_requested():
            raise RuntimeError(
                f"verl platform: expected {ENV}={NAME} exactly when the trainer runs on CPU "
                f"ranks (trainer_gpus = {spec.resources.trainer_gpus}); found {ENV}="
                f"{os.environ.get(ENV, '')!r}; fix: build the trainer with forge_ppo."
                "build_trainer (it sets the variable before verl is imported)"
            )
        ensure_registered()  # this process may have imported verl before the variable was set
        try:
            # 1. Ray (join `resources.ray_address`, or start one with the spec's resources)
            self._cluster = start_ray(spec, self.topology, self._worker_env())
            # 2. the host mirror: fresh or strictly warm-started (the local trainer's gates)
            self.actor, self.critic, self.parent = build_models(spec, model_dir, run_dir)
            # 3. the initial weights as verl loads them: a PEFT adapter, an HF value model
            init = run_dir / "verl-init"
            self.actor.save_adapter(init / "adapter")
            critic_folder(self.critic, init / "critic")
            # 4. the worker groups, then proof that every rank holds the mirror's weights
            self._build_workers(model_dir, init)
            self.budgets = self._read_budgets()
            self.settings = self._read_settings()
            self._check_loaded()
            self._record_peaks()  # after loading; again after each update
        except BaseException:
            self.close()
            raise

    # -- construction ------------------------------------------------------------------------

    def _worker_env(self) -> dict[str, str]:
        env = dict(WORKER_ENV)
        if self.topology.device == "cpu":
            env[ENV] = NAME  # the CPU platform plugin, in every worker
            threads = rank_threads(self.topology.world_size, self.spec.resources.ray_address)
            if threads is not None:
                env["OMP_NUM_THREADS"] = threads
        return env

    def _build_workers(self, model_dir: Path, init: Path) -> None:
        cfg = compose(self.spec, model_dir, str(init / "critic"), self.topology)
        cfg.actor_rollout_ref.model.lora_adapter_path = str(init / "adapter")
        critic_cfg = omega_conf_to_dataclass(cfg.critic)
        self._apply_critic_budgets(critic_cfg)
        self.critic_config = critic_cfg
        worker_cfg = TrainingWorkerConfig(
            model_type="value_model",
            model_config=critic_cfg.model,
            engine_config=critic_cfg.engine,
            optimizer_config=critic_cfg.optim,
            checkpoint_config=critic_cfg.checkpoint,
        )
        pool = RayResourcePool(
            process_on_nodes=[self.topology.world_size],
            use_gpu=self.topology.device == "cuda",
            name_prefix=f"forge-{os.getpid()}",
            max_colocate_count=1,
        )
        classes = {
            "actor": RayClassWithInitArgs(
                cls=ray.remote(ForgeActorWorker), config=cfg.actor_rollout_ref, role="actor"
            ),
            "critic": RayClassWithInitArgs(cls=ray.remote(ForgeCriticWorker), config=worker_cfg),
        }
        group = RayWorkerGroup(
            resource_pool=pool,
            ray_cls_with_init=create_colocated_worker_cls(class_dict=classes),
            device_name=self.topology.device,
        )
        self._groups = {"all": group, **group.spawn(prefix_set=classes.keys())}
        self._groups["actor"].init_model()
        self._groups["critic"].reset()
        self._groups["critic"].set_loss_fn(partial(value_loss, config=critic_cfg))
        for part in ("actor", "critic"):  # record the micro-batches each engine forms
            self._groups[part].forge_watch()

    def _apply_critic_budgets(self, critic_cfg: Any) -> None:
        """The critic's budgets on its ENGINE config, each from its own spec field: verl's v1
        trainer sets both from the inference budget (#7462, `trainer_base.py:267-268`) and the
        engine reads only these fields."""
        ctx = self.spec.context
        critic_cfg.engine.infer_max_token_len_per_gpu = ctx.critic_infer_tokens
        critic_cfg.engine.max_token_len_per_gpu = ctx.critic_train_tokens
        critic_cfg.engine.use_dynamic_bsz = True

    def _read_budgets(self) -> TokenBudgets:
        """The budgets the built engines hold, every rank agreeing (else the gate fails)."""
        actor = self._groups["actor"].forge_budgets()
        critic = self._groups["critic"].forge_budgets()
        for name, ranks in (("actor", actor), ("critic", critic)):
            if any(r != ranks[0] for r in ranks):
                raise GateError(
                    Gate.PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED,
                    [
                        Violation(
                            rule=f"budget.{name}.ranks",
                            expected="every rank with the same budgets",
                            found=str(ranks),
                            fix="rebuild the workers from one config",
                        )
                    ],
                )
        return TokenBudgets(
            actor_train=actor[0]["train"],
            actor_infer=actor[0]["infer"],
            critic_train=critic[0]["train"],
            critic_infer=critic[0]["infer"],
        )

    def _read_settings(self) -> TrainerSettings:
        """The offload / checkpointing / fused-kernel / dtype settings the built engines run
        with and the entropy coefficient of the actor's loss, every rank agreeing (else the
        settings gate fails here)."""
        actor = self._groups["actor"].forge_settings()
        critic = self._groups["critic"].forge_settings()
        check = Check(Gate.PPO_TRAINER_SETTINGS_GATE_PASSED)
        for name, ranks in (("actor", actor), ("critic", critic)):
            check.require(
                all(r == ranks[0] for r in ranks),
                rule=f"settings.{name}.ranks",
                expected="every rank with the same settings",
                found=str(ranks),
                fix="rebuild the workers from one config",
            )
        if not check.ok:
            raise GateError(check.gate, check.violations)
        entropy = actor[0].pop("entropy_coeff")
        return TrainerSettings(
            actor=ModelSettings(**actor[0]),
            critic=ModelSettings(**critic[0]),
            entropy_coeff=entropy,
        )

    def _micro_batch_metrics(self) -> dict[str, float]:
        """Per budget, the largest micro-batch any rank's engine formed during this update
        (`_readback`): `perf/peak_padded_tokens/<budget>` as computed (padded to the longest
        sequence unless packed), `perf/peak_real_tokens/<budget>` (what verl's budget counts),
        `perf/micro_batch_budget/<budget>` (the budget the engine batched under) and
        `perf/micro_batches/<budget>` (formed, all ranks)."""
        metrics: dict[str, float] = {}
        for part in ("actor", "critic"):
            for rank in self._groups[part].forge_micro_batches():
                for pass_, entry in rank.items():
                    budget = f"{part}_{pass_}"
                    for key, name in (
                        ("tokens", "peak_padded_tokens"),
                        ("real", "peak_real_tokens"),
                        ("budget", "micro_batch_budget"),
                        ("micro_batches", "micro_batches"),
                    ):
                        metric, value = f"perf/{name}/{budget}", float(entry[key])
                        before = metrics.get(metric, 0.0)
                        metrics[metric] = (
                            before + value if key == "micro_batches" else (max(before, value))
                        )
        return metrics

    def _record_peaks(self) -> None:
        """Each rank's process peaks (host RSS; on GPUs allocated and reserved memory), as the
        rank measured them, into `<run_dir>/process-peaks/verl-ranks.json` for the run's
        provenance: after loading and after each update. Never asked after a worker failed (a
        rank left in a collective would not answer): the last peaks recorded stay."""
        ranks = self._groups["actor"].forge_memory()
        peaks = [ProcessPeak.model_validate(rank) for rank in ranks]
        write_process_peaks(self.run_dir, "verl-ranks", peaks)

    def ranks_seen(self) -> list[dict[str, Any]]:
        """Each rank's own answer: its rank and world size in the process group its process
        joined, its pid and Ray node (the separated-rollout gate counts these, not the spec)."""
        return list(self._groups["actor"].forge_rank())

    def _check_loaded(self) -> None:
        """PPO_TRAINER_RANKS_LOAD_PASSED ranks=N: on every rank the actor's adapter and the
        critic's tensors equal the mirror's (after a warm start: the file's, which the mirror's
        PPO_ACTOR_LORA_LOAD_PASSED proved), no meta tensor, all finite."""
        want_actor = tensor_fingerprint(adapter_state_dict(self.actor.model))
        want_critic = tensor_fingerprint(to_verl_critic(self.critic.state_dict()))
        check = Check(Gate.PPO_TRAINER_RANKS_LOAD_PASSED)
        answered = 0
        for part, want in (("actor", want_actor), ("critic", want_critic)):
            ranks = self._groups[part].forge_fingerprint()
            answered = max(answered, len(ranks))
            for rank in ranks:
                r = rank["rank"]
                check.require(
                    rank["fingerprint"] == want,
                    rule=f"verl.{part}.values",
                    expected=f"rank {r}: the {part} tensors of the loaded file",
                    found=f"fingerprint {rank['fingerprint'][:12]} != {want[:12]}",
                    fix="the worker did not load the file; see its log",
                )
                check.require(
                    not rank["meta"],
                    rule=f"verl.{part}.meta",
                    expected=f"rank {r}: no meta tensors",
                    found=rank["meta"],
                    fix="load the weights before sharding",
                )
                check.require(
                    rank["finite"],
                    rule=f"verl.{part}.finite",
                    expected=f"rank {r}: finite tensors",
                    found="NaN/inf",
                    fix="use another parent checkpoint",
                )
        fields = {
            "backend": "verl",
            "ranks": answered,  # the ranks that answered, not the spec's count
            "actor_fingerprint": want_actor[:16],
            "critic_fingerprint": want_critic[:16],
        }
        gate(self.run_dir, check.gate, check.violations, fields)

    # -- the Trainer protocol ----------------------------------------------------------------

    def update(
        self,
        rows: Sequence[SampleRow],
        step: int,
        *,
        episodes: Sequence[EpisodeOutcome] | None = None,
    ) -> UpdateResult:
        """One PPO update through the workers, in the order of verl's `ray_trainer.py`."""
        timer = PhaseTimer()
        kept, dropped = split_rows(rows)
        if not kept:
            raise PPOInputError(
                "rows",
                expected=">= 1 row with prompt and response tokens",
                found=f"0 of {len(rows)} ({dropped})",
                fix="see rollout/conversion/* for why rows were dropped",
            )
        try:
            return self._update(rows, kept, dropped, step, episodes, timer)
        except ray.exceptions.RayError as error:
            first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
            raise VerlWorkerError(
                f"verl update {step}: expected every worker of the {self.topology.world_size} "
                f"ranks to answer; found {type(error).__name__}: {first}; fix: see the worker "
                "log (`ray logs`, or the lines prefixed by the worker pid above): the update "
                "was not applied to the run and no checkpoint was written"
            ) from error

    def _update(
        self,
        rows: Sequence[SampleRow],
        kept: list[SampleRow],
        dropped: dict[str, int],
        step: int,
        episodes: Sequence[EpisodeOutcome] | None,
        timer: PhaseTimer,
    ) -> UpdateResult:
        ppo = self.ppo
        # 1. rows -> DataProto (padded to a multiple of ranks x mini-batches)
        world = self.topology.world_size
        actor_minis = max(ppo.batch_size // ppo.actor_mini_batch_size, 1)
        critic_minis = max(ppo.batch_size // ppo.critic_mini_batch_size, 1)
        divisor = world * lcm(actor_minis, critic_minis)
        tensors, uids = rows_to_tensors(kept, pad_to=divisor)
        batch = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
        mask = tensors["response_mask"].bool()
        timer.lap("collate")
        # 2. old log-probs (and entropy), reference log-probs (adapter disabled) when KL is on
        old_log_probs, entropy = self._log_probs(batch, reference=False)
        batch.batch["old_log_probs"] = old_log_probs
        if ppo.kl_beta > 0:
            batch.batch["ref_log_prob"] = self._log_probs(batch, reference=True)[0]
        timer.lap("old_log_probs")
        # 3. values: verl takes the value of response token t from the hidden state at t-1
        values = self._values(batch)
        batch.batch["values"] = values
        timer.lap("values")
        # 4. GAE over action tokens (Forge's vectorised GAE; verl's is a loop per token)
        advantages, returns = compute_gae(
            tensors["token_level_rewards"], values, mask, ppo.gamma, ppo.gae_lambda
        )
        whitened = masked_whiten(advantages, mask) if ppo.whiten_advantages else advantages
        batch.batch["advantages"] = whitened * mask
        batch.batch["returns"] = returns * mask
        timer.lap("advantages")
        # 5. critic update, then actor update; then the new weights into the host mirror
        tracker = UpdateTracker(self.actor.model, self.critic)
        total = len(batch)
        critic_out = self._train("critic", batch, total // critic_minis)
        timer.lap("update_critic")
        actor_out = self._train("actor", batch, total // actor_minis)
        timer.lap("update_actor")
        self._sync_mirror()
        timer.lap("mirror_sync")
        # 6. metrics under Forge's canonical names
        real = tensors["forge_real_row"]
        outcomes = list(episodes) if episodes is not None else None
        if outcomes is None:
            outcomes = episode_outcomes(rows, success_reward=1.0)
        task_ids = [row.header.task_id for row in kept]
        actor_metrics = _mean_metrics(actor_out, "actor/")
        critic_metrics_ = _mean_metrics(critic_out, "critic/")
        metrics = {
            **batch_metrics(rows=rows, kept=kept, dropped=dropped, episodes=outcomes),
            **actor_metrics,
            **critic_metrics_,
            **critic_metrics(task_ids, values[real], returns[real], advantages[real], mask[real]),
            "actor/entropy": float((entropy * mask).sum() / mask.sum().clamp(min=1)),
            **self._micro_batch_metrics(),
            **timer.metrics(),
            "perf/verl_ranks": float(world),
        }
        metrics = {k: float(v) for k, v in metrics.items()}
        assert_finite_metrics(metrics)
        self._record_peaks()
        action_tokens = int(mask.sum())
        actor_steps = ppo.ppo_epochs * actor_minis
        critic_steps = ppo.ppo_epochs * critic_minis
        record = tracker.finish(
            step=step,
            actor_optimizer_steps=actor_steps,
            critic_optimizer_steps=critic_steps,
            actor_loss=metrics.get("actor/pg_loss", 0.0),
            critic_loss=metrics.get("critic/vf_loss", 0.0),
            action_tokens=action_tokens,
        )
        return UpdateResult(
            step=step,
            metrics=metrics,
            record=record,
            rows=len(kept),
            dropped_rows=dropped,
            episodes=len(outcomes),
            action_tokens=action_tokens,
            tokens=int(tensors["attention_mask"][real].sum()),
            actor_optimizer_steps=actor_steps,
            critic_optimizer_steps=critic_steps,
        )

    def export_adapter(self, folder: Path) -> None:
        """The actor's adapter (gathered from the ranks into the mirror) in PEFT format."""
        self.actor.save_adapter(folder)

    def save(self, root: Path, *, step: int, record: UpdateRecord, run_dir: Path) -> Path:
        """Forge's layout from the mirror: PEFT adapter, critic weights (spec dtype), summary;
        no verl shards, no optimizer state."""
        return save_run_checkpoint(
            root,
            self.spec,
            step=step,
            actor=self.actor.model,
            base_model=self.actor.base_model,
            critic=self.critic,
            record=record,
            parent=self.parent,
            run_dir=run_dir,
        )

    def close(self) -> None:
        """Kill the worker actors and stop a Ray this trainer started (idempotent)."""
        group = self._groups.get("all")
        for worker in group.workers if group is not None else ():
            ray.kill(worker, no_restart=True)
        self._groups = {}
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None

    # -- steps of an update --------------------------------------------------------------------

    def _log_probs(self, batch: DataProto, *, reference: bool) -> tuple[torch.Tensor, torch.Tensor]:
        td = left_right_2_no_padding(batch.to_tensordict())
        meta: dict[str, Any] = {
            "calculate_entropy": not reference,
            "compute_loss": False,
            "temperature": 1.0,  # raw log-probs: the convention of Forge's servers and vLLM's
        }
        if reference:
            meta["no_lora_adapter"] = True  # the reference policy: the adapter disabled
        tu.assign_non_tensor(td, **meta)
        out = self._groups["actor"].compute_log_prob(td)
        log_probs = no_padding_2_padding(tu.get(out, "log_probs"), td).float()
        entropy = (
            no_padding_2_padding(tu.get(out, "entropy"), td).float() if not reference else log_probs
        )
        return log_probs, entropy

    def _values(self, batch: DataProto) -> torch.Tensor:
        td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(td, compute_loss=False, temperature=1.0)  # verl reads it
        out = self._groups["critic"].infer_batch(td).get()
        return no_padding_2_padding(tu.get(out, "values"), td).float()

    def _train(self, part: str, batch: DataProto, mini_batch_size: int) -> dict[str, Any]:
        td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(
            td,
            global_batch_size=mini_batch_size,
            mini_batch_size=mini_batch_size,
            epochs=self.ppo.ppo_epochs,
            seed=self.spec.seed,
            dataloader_kwargs={"shuffle": False},
            temperature=1.0,
            **(
                {"calculate_entropy": self.ppo.entropy_coeff > 0, "compute_loss": True}
                if part == "actor"
                else {}
            ),
        )
        if part == "actor":
            out = self._groups["actor"].update_actor(td)
        else:
            out = self._groups["critic"].train_mini_batch(td).get()
        return dict(tu.get(out, "metrics"))

    def _sync_mirror(self) -> None:
        """The ranks' adapter and critic tensors into the host mirror (rank 0 gathers)."""
        adapter = self._groups["actor"].forge_weights()[0]
        critic = self._groups["critic"].forge_weights()[0]
        result: Any = set_peft_model_state_dict(self.actor.model, adapter)
        missing = [k for k in result.missing_keys if "lora_" in k]
        unexpected = list(result.unexpected_keys)
        if missing or unexpected:
            raise RuntimeError(
                "verl actor -> mirror: expected the adapter's own keys; found missing "
                f"{missing[:3]} unexpected {unexpected[:3]}; fix: rebuild the actor with the "
                "spec's lora settings"
            )
        self.critic.load_state_dict(from_verl_critic(critic), strict=True)


def _mean_metrics(out: dict[str, Any], prefix: str) -> dict[str, float]:
    """verl's per-micro-batch metric lists -> one mean per name, under `prefix`."""
    metrics: dict[str, float] = {}
    for key, value in out.items():
        values = value if isinstance(value, list) else [value]
        numbers = [float(v) for v in values if isinstance(v, int | float) or torch.is_tensor(v)]
        if numbers:
            metrics[prefix + key.removeprefix(prefix)] = sum(numbers) / len(numbers)
    return metrics


def build_verl_trainer(spec: RunSpec, model_dir: Path, run_dir: Path) -> VerlTrainer:
    """The verl trainer for `spec` (`backends.trainer = "verl"`)."""
    return VerlTrainer(spec, model_dir, run_dir)
