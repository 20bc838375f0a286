"""Proof that a real PPO update happened: no checkpoint is written without one (DESIGN §4).

`UpdateTracker(actor, critic)` snapshots the actor's trainable (LoRA) parameters and a cheap
checksum of the critic before the optimizer steps; `finish(...)` measures what changed and
returns an `UpdateRecord` or raises one GateError listing every reason it is not a real update.
The record carries the adapter's fingerprint, so a save can prove it is writing the very
weights the update produced.
"""

from __future__ import annotations

import math

import torch
from peft import PeftModel
from pydantic import BaseModel, ConfigDict, Field

from forge_gates import Check
from forge_ppo.checkpoint._adapter import adapter_state_dict, tensor_fingerprint


class UpdateRecord(BaseModel):
    """What one PPO update did. Only `UpdateTracker.finish` should build one."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    schema_version: str = Field(default="forge-ppo/update-record@1", description="Schema.")
    step: int = Field(gt=0, description="Global step this update produced (1-based).")
    actor_optimizer_steps: int = Field(gt=0, description="Actor optimizer.step() calls.")
    critic_optimizer_steps: int = Field(gt=0, description="Critic optimizer.step() calls.")
    actor_delta_norm: float = Field(gt=0, description="L2 norm of the change of the adapter.")
    critic_checksum_before: tuple[float, float] = Field(
        description="(sum, sum of squares) of critic parameters before the update."
    )
    critic_checksum_after: tuple[float, float] = Field(
        description="(sum, sum of squares) of critic parameters after the update."
    )
    actor_fingerprint: str = Field(
        min_length=64, max_length=64, description="SHA-256 of the adapter tensors after it."
    )
    actor_loss: float = Field(description="Last actor loss (finite).")
    critic_loss: float = Field(description="Last critic loss (finite).")
    action_tokens: int = Field(gt=0, description="Action tokens the update trained on.")


def critic_checksum(critic: torch.nn.Module, chunk: int = 1 << 24) -> tuple[float, float]:
    """(sum, sum of squares) over every critic parameter in float64: one pass, no full copy
    (at most `chunk` elements are upcast at a time, on the parameters' own device)."""
    total = torch.zeros((), dtype=torch.float64)
    squares = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for p in critic.parameters():
            for piece in p.detach().reshape(-1).split(chunk):
                x = piece.to(torch.float64)
                total += x.sum().cpu()
                squares += x.square().sum().cpu()
    return float(total), float(squares)


class UpdateTracker:
    """Measures one update: construct before the optimizer steps, `finish` after them."""

    def __init__(self, actor: PeftModel, critic: torch.nn.Module) -> None:
        self.actor = actor
        self.critic = critic
        self._actor_before = {
            name: p.detach().clone() for name, p in actor.named_parameters() if p.requires_grad
        }
        self._critic_before = critic_checksum(critic)

    def finish(
        self,
        *,
        step: int,
        actor_optimizer_steps: int,
        critic_optimizer_steps: int,
        actor_loss: float,
        critic_loss: float,
        action_tokens: int,
    ) -> UpdateRecord:
        """The record of this update; raises GateError(PPO_UPDATE) listing every problem."""
        check = Check("PPO_UPDATE")
        params = dict(self.actor.named_parameters())
        delta_sq, finite = 0.0, True
        for name, before in self._actor_before.items():
            after = params[name].detach()
            finite = finite and bool(torch.isfinite(after).all())
            delta_sq += float((after.to(torch.float64) - before.to(torch.float64)).square().sum())
        delta = math.sqrt(delta_sq)
        after_critic = critic_checksum(self.critic)
        check.require(
            bool(self._actor_before),
            rule="update.actor_trainable",
            expected="trainable adapter parameters",
            found="none",
            fix="wrap the actor with get_peft_model before tracking",
        )
        check.require(
            finite and math.isfinite(delta),
            rule="update.actor_finite",
            expected="finite adapter weights after the update",
            found=f"delta {delta}",
            fix="lower the learning rate / check the loss for NaN",
        )
        check.require(
            delta > 0,
            rule="update.actor_changed",
            expected="adapter weights changed",
            found=f"delta norm {delta}",
            fix="run the actor optimizer step",
        )
        check.require(
            all(map(math.isfinite, after_critic)),
            rule="update.critic_finite",
            expected="finite critic weights",
            found=f"checksum {after_critic}",
            fix="lower the critic learning rate / check the value loss",
        )
        check.require(
            after_critic != self._critic_before,
            rule="update.critic_changed",
            expected="critic weights changed",
            found=f"checksum {after_critic} unchanged",
            fix="run the critic optimizer step",
        )
        for rule, value in (("actor_loss", actor_loss), ("critic_loss", critic_loss)):
            check.require(
                math.isfinite(value),
                rule=f"update.{rule}",
                expected="a finite loss",
                found=value,
                fix="inspect the batch that produced it",
            )
        for rule, value in (
            ("actor_optimizer_steps", actor_optimizer_steps),
            ("critic_optimizer_steps", critic_optimizer_steps),
            ("action_tokens", action_tokens),
            ("step", step),
        ):
            check.require(
                value > 0,
                rule=f"update.{rule}",
                expected="> 0",
                found=value,
                fix="count it from the update loop",
            )
        check.raise_if_failed()
        return UpdateRecord(
            step=step,
            actor_optimizer_steps=actor_optimizer_steps,
            critic_optimizer_steps=critic_optimizer_steps,
            actor_delta_norm=delta,
            critic_checksum_before=self._critic_before,
            critic_checksum_after=after_critic,
            actor_fingerprint=tensor_fingerprint(adapter_state_dict(self.actor)),
            actor_loss=actor_loss,
            critic_loss=critic_loss,
            action_tokens=action_tokens,
        )
