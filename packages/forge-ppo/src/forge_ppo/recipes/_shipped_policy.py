"""The demo policy as shipped: one verified build in the package, used only on its exact key.

The demo policy's build is minutes of CPU (`_demo_policy`) where the smoke after it is seconds,
so the package ships one build in `data/demo-policy/`: `demo-policy.json` (its report),
`gates.jsonl` (its checkpoint gate), the checkpoint `checkpoint/global_step_1/`, and
`artifact.json` (schema `forge-ppo/demo-policy-artifact@1`): the cache key, the key's inputs,
the torch and CPU kernels of the machine that packed it, and every other file's size and
SHA-256. The model folders the checkpoint records are placeholders in the shipped files (a path
is no identity; the base model's content is, through the key and the summary's fingerprint).

`install_shipped` puts it into a cache staging folder, as numbered steps, or says why not:

1. the key this run computes (base model content, critic base, LoRA, agent, tasks, SFT spec)
   equals the artifact's exactly. The tiny model is built from a config and seed 0; with the
   locked torch its weights are byte-identical on x86 CPUs with AVX2 or AVX-512 but not with
   torch's scalar kernels (ATEN_CPU_CAPABILITY=default; likely other architectures too): there
   the base fingerprint, hence the key, differs, and the demo policy is built;
2. exactly the listed files are there, each with its recorded size and SHA-256;
3. copied, the placeholders set to this machine's model folders (adapter config, critic config,
   summary and the summary's records of those two files), the checkpoint passes the checks a
   warm start applies before loading (`check_warm_start_checkpoint`: every file against the
   summary, base model by content, LoRA shape, critic base and dtype, finite tensors);
4. `shipped-artifact.json` records where it came from.

`pack_shipped` writes the artifact from a finished build (`_demo_policy.ship_demo_policy`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from forge_gates import LoRASpec, atomic_write_json, file_sha256, staging_dir
from forge_ppo.checkpoint._adapter import ADAPTER_CONFIG, ADAPTER_DIR
from forge_ppo.checkpoint._summary import (
    CRITIC_CONFIG,
    CRITIC_DIR,
    SUMMARY_NAME,
    CheckpointSummary,
    FileRecord,
)
from forge_ppo.checkpoint._verify import check_checkpoint_files
from forge_ppo.checkpoint._warm_start import check_warm_start_checkpoint

SHIPPED_DIR = Path(__file__).resolve().parent / "data" / "demo-policy"
ARTIFACT_NAME = "artifact.json"
ARTIFACT_SCHEMA = "forge-ppo/demo-policy-artifact@1"
PROVENANCE_NAME = "shipped-artifact.json"
PROVENANCE_SCHEMA = "forge-ppo/demo-policy-shipped@1"
BASE_PLACEHOLDER = "<base model folder: set at install>"
CRITIC_PLACEHOLDER = "<critic base model folder: set at install>"
CHECKPOINT = "checkpoint/global_step_1"
SHIPPED = ("demo-policy.json", "gates.jsonl", CHECKPOINT)  # what a build folder contributes
BUILD_ENV = "FORGE_DEMO_POLICY"  # "build": refuse the shipped artifact and build here


class Refused(Exception):
    """Why the shipped artifact is not used (the message is the reason)."""


def shipped_installer(
    key: str, payload: dict[str, Any], *, base_model: str, critic_base_model: str,
    lora_spec: LoRASpec | None,
) -> Callable[[Path], dict[str, Any] | None]:  # fmt: skip
    """`cached_build`'s `shipped`: `install_shipped` into its staging folder, or None (then
    it builds) with the reason on stderr; `FORGE_DEMO_POLICY=build` always says None."""
    assert lora_spec is not None, "the demo policy is a LoRA SFT: the spec needs [lora]"

    def install(staging: Path) -> dict[str, Any] | None:
        if wants_build():
            _say(f"shipped demo policy not used: {BUILD_ENV}=build; building it here")
            return None
        try:
            report = install_shipped(
                SHIPPED_DIR, staging, key=key, payload=payload, base_model=base_model,
                critic_base_model=critic_base_model, lora_spec=lora_spec,
            )  # fmt: skip
        except Refused as why:
            _say(
                f"shipped demo policy not used: {why}; building it here (minutes; progress follows)"
            )
            return None
        _say(f"using the shipped demo policy ({SHIPPED_DIR}): key {key[:16]} matches, every "
             "file's SHA-256 verified, its checkpoint checked as a warm start")  # fmt: skip
        return report

    return install


def wants_build() -> bool:
    """`FORGE_DEMO_POLICY`: "build" refuses the shipped artifact; unset or "shipped" uses it."""
    value = os.environ.get(BUILD_ENV, "")
    if value not in ("", "build", "shipped"):
        raise ValueError(
            f"{BUILD_ENV}: expected 'build' (refuse the shipped demo policy) or 'shipped' (the "
            f"default: use it when its key matches); found {value!r}; fix: set one or unset it"
        )
    return value == "build"


def _say(line: str) -> None:
    print(f"demo-policy: {line}", file=sys.stderr, flush=True)


def install_shipped(
    artifact: Path,
    staging: Path,
    *,
    key: str,
    payload: dict[str, Any],
    base_model: str,
    critic_base_model: str,
    lora_spec: LoRASpec,
) -> dict[str, Any]:
    """The shipped build installed into the empty folder `staging` (steps 1-4 of the module
    docstring); returns its report (`demo-policy.json`). Raises `Refused` with the reason, and
    then `staging` may hold a partial copy (the caller discards it)."""
    # 1. the key, before any file is read
    manifest = read_manifest(artifact)
    if manifest["key"] != key:
        raise Refused(f"its key {manifest['key'][:16]} differs from this run's {key[:16]} "
                      f"({key_difference(manifest, payload)})")  # fmt: skip
    # 2. the files as shipped
    files = verify_files(artifact, manifest["files"])
    # 3. copied, this machine's model folders in place of the placeholders, then checked as
    #    a warm start checks a checkpoint before loading it
    for name in files:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(artifact / name, staging / name)
    checkpoint = staging / CHECKPOINT
    relocate(checkpoint, base_model=base_model, critic_base_model=critic_base_model)
    _, problems = check_warm_start_checkpoint(
        checkpoint, base_model=base_model, lora_spec=lora_spec, critic_base_model=critic_base_model
    )
    if problems:
        raise Refused("the installed checkpoint fails the warm-start checks: "
                      + "; ".join(str(v) for v in problems))  # fmt: skip
    # 4. provenance beside the report
    atomic_write_json(
        staging / PROVENANCE_NAME,
        {
            "schema": PROVENANCE_SCHEMA,
            "artifact": str(artifact),
            "artifact_sha256": file_sha256(artifact / ARTIFACT_NAME),
            "key": key,
            "files_verified": len(files),
            "built_with": manifest.get("built_with", {}),
        },
    )
    return json.loads((staging / "demo-policy.json").read_text("utf-8"))


def read_manifest(artifact: Path) -> dict[str, Any]:
    """`artifact.json`, schema checked; `Refused` when absent or not this schema."""
    path = artifact / ARTIFACT_NAME
    try:
        manifest = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"expected {path}; found {type(exc).__name__}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("schema") != ARTIFACT_SCHEMA:
        found = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise Refused(f"{path}: expected schema {ARTIFACT_SCHEMA}; found {found!r}")
    if not isinstance(manifest.get("key"), str) or not isinstance(manifest.get("files"), dict):
        raise Refused(f"{path}: expected a 'key' and a 'files' map; found {sorted(manifest)}")
    return manifest


def verify_files(artifact: Path, listed: dict[str, Any]) -> list[str]:
    """The listed files' names, once each is there with its size and SHA-256 and nothing else
    is; `Refused` naming every file that is missing, extra, resized or changed."""
    present = {
        p.relative_to(artifact).as_posix()
        for p in artifact.rglob("*")
        if p.is_file() and p.name != ARTIFACT_NAME and "__pycache__" not in p.parts
    }
    wrong = [f"{name}: missing" for name in sorted(set(listed) - present)]
    wrong += [f"{name}: not listed" for name in sorted(present - set(listed))]
    for name in sorted(set(listed) & present):
        record = FileRecord.model_validate(listed[name])
        size, digest = (artifact / name).stat().st_size, file_sha256(artifact / name)
        if (size, digest) != (record.bytes, record.sha256):
            wrong.append(f"{name}: expected {record.bytes} bytes sha256 {record.sha256[:16]}, "
                         f"found {size} bytes sha256 {digest[:16]}")  # fmt: skip
    if wrong:
        raise Refused("its files differ from artifact.json: " + "; ".join(wrong))
    return sorted(listed)


def key_difference(manifest: dict[str, Any], ours: dict[str, Any]) -> str:
    """Which inputs of the key differ, by name; for the base model, what it was built with."""
    shipped = manifest.get("key_payload", {})
    names = sorted(k for k in set(shipped) | set(ours) if shipped.get(k) != ours.get(k))
    if not names:
        return "same inputs, another key scheme"
    text = "differs in: " + ", ".join(names)
    if "base_model" in names:
        built = manifest.get("built_with", {})
        text += (
            f"; the base model's files differ from those it was trained on (built with torch "
            f"{built.get('torch')} on {built.get('cpu_capability')} kernels; here torch "
            f"{torch.__version__} on {torch.backends.cpu.get_cpu_capability()})"
        )
    return text


def relocate(checkpoint: Path, *, base_model: str, critic_base_model: str) -> None:
    """Set the model folders a checkpoint records (adapter config, critic config, summary) and
    the summary's records of the two rewritten files and of the byte counts."""
    adapter, critic = f"{ADAPTER_DIR}/{ADAPTER_CONFIG}", f"{CRITIC_DIR}/{CRITIC_CONFIG}"

    def backbone(config: dict[str, Any]) -> dict[str, Any]:
        return {**config.get("backbone_config", {}), "_name_or_path": critic_base_model}

    _edit_json(checkpoint / adapter, lambda c: {**c, "base_model_name_or_path": base_model})
    _edit_json(checkpoint / critic, lambda c: {**c, "base_model": critic_base_model,
                                               "backbone_config": backbone(c)})  # fmt: skip
    path = checkpoint / SUMMARY_NAME
    summary = CheckpointSummary.model_validate_json(path.read_text("utf-8"))
    files = dict(summary.files)
    for name in (adapter, critic):
        files[name] = FileRecord(
            bytes=(checkpoint / name).stat().st_size, sha256=file_sha256(checkpoint / name)
        )
    actor = sum(r.bytes for k, r in files.items() if k.startswith(f"{ADAPTER_DIR}/"))
    critic_bytes = sum(r.bytes for k, r in files.items() if k.startswith(f"{CRITIC_DIR}/"))
    update = {"base_model": base_model, "critic_base_model": critic_base_model, "files": files,
              "actor_bytes": actor, "critic_bytes": critic_bytes,
              "total_bytes": actor + critic_bytes}  # fmt: skip
    atomic_write_json(path, summary.model_copy(update=update).model_dump(mode="json"))


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    atomic_write_json(path, edit(json.loads(path.read_text("utf-8"))))


def pack_shipped(build: Path, out: Path, *, key: str, payload: dict[str, Any]) -> Path:
    """Write the artifact of the finished build `build` (a `demo-policy-<key>` cache folder)
    into `out`, replacing it: its report, gate line and checkpoint with placeholder model
    folders, then `artifact.json`. Returns `out`."""
    missing = [name for name in SHIPPED if not (build / name).exists()]
    if missing:
        raise FileNotFoundError(
            f"demo policy artifact: expected a finished build at {build} with {list(SHIPPED)}; "
            f"found {missing} missing; fix: build it first (forge-ppo sft --config smoke-local)"
        )
    problems = check_checkpoint_files(build / CHECKPOINT)[1]
    if problems:
        raise ValueError(f"demo policy artifact: expected an intact build at {build}; found "
                         + "; ".join(map(str, problems)))  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(out.parent, f".{out.name}-")
    for name in SHIPPED:
        copy = shutil.copytree if (build / name).is_dir() else shutil.copyfile
        copy(build / name, staging / name)
    relocate(
        staging / CHECKPOINT, base_model=BASE_PLACEHOLDER, critic_base_model=CRITIC_PLACEHOLDER
    )
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    manifest = {
        "schema": ARTIFACT_SCHEMA,
        "key": key,
        "key_payload": payload,
        "built_with": {
            "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        },
        "files": {
            p.relative_to(staging).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
            for p in files
        },
    }
    atomic_write_json(staging / ARTIFACT_NAME, manifest)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out
