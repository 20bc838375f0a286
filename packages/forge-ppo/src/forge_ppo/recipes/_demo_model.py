"""The demo policy merged into its base model: a plain model folder an inference server serves
as its base, with a fresh RL LoRA (no `lm_head`) trained on top.

vLLM refuses the demo policy's adapter (`expected target modules in {'v_proj', ...} but
received ['lm_head', 'lm_head']`: HTTP 500 from /v1/load_lora_adapter), and the adapter needs
`lm_head` (smoke-local's `[lora]` comment). Merged (PEFT `merge_and_unload`) it is no adapter at
all; `nox -s production_cpu` starts vLLM on it and runs verl with `--set model.path=<folder>`.

    python -m forge_ppo.recipes._demo_model [--config smoke-local] [--cache-dir .cache/forge]
    # DEMO_MODEL_MERGED key=<16 hex> path=<cache>/demo-model-<key16>  (DEMO_MODEL_CACHED after)

1. the base (`resolve_model`) and the demo policy's adapter (`resolve_demo_policy`: for
   smoke-local's spec, the shipped build);
2. the key: SHA-256 of the base's content fingerprint and the adapter's (weights and config,
   without the machine-local `base_model_name_or_path`), so a changed base or demo policy is
   merged again and nothing else is;
3. under a file lock, when `<cache>/demo-model-<key[:16]>/` is missing: the base loaded in fp32,
   its `lm_head` untied from `embed_tokens` (merging the head's delta into a tied weight would
   move the input embeddings too), the adapter merged, saved with the base's tokenizer files and
   `demo-model.json`, renamed into place. Same inputs, same bytes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from forge_gates import (
    RunSpec,
    atomic_write_json,
    file_sha256,
    load_spec,
    sha256_canonical,
    staging_dir,
    sweep_stale_staging,
)
from forge_ppo.checkpoint._summary import model_fingerprint
from forge_ppo.recipes._demo_policy import resolve_demo_policy
from forge_rollout import resolve_model

DEMO_MODEL = "demo-model"
SCHEMA = "forge-ppo/demo-model@1"
RECORD_NAME = f"{DEMO_MODEL}.json"  # written last: its presence means the folder is complete
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MACHINE_LOCAL = "base_model_name_or_path"  # the installed adapter's path to this machine's base
# the base's files the merged folder takes as they are (what a tokenizer / generation reads)
CARRIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "generation_config.json",
)


def adapter_fingerprint(adapter: Path) -> str:
    """SHA-256 of a PEFT adapter folder's weights and config, without `base_model_name_or_path`
    (a path: the same adapter installed next to another base copy fingerprints the same)."""
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    config.pop(MACHINE_LOCAL, None)
    return sha256_canonical({"config": config, "weights": file_sha256(adapter / ADAPTER_WEIGHTS)})


def merge_key(base: Path, adapter: Path) -> str:
    """The merged model's cache key: what decides its bytes (schema, base, adapter)."""
    return sha256_canonical(
        {
            "schema": SCHEMA,
            "base_model": model_fingerprint(base),
            "adapter": adapter_fingerprint(adapter),
        }
    )


def merge_adapter(base: Path, adapter: Path, out: Path) -> Path:
    """`adapter` merged into `base`, saved as a full model folder at `out` (fp32, untied head,
    the base's tokenizer files copied byte for byte, every file 0644); returns `out`."""
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    if model.config.tie_word_embeddings:
        # the adapter's lm_head delta belongs to the head only: give the head its own copy
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
        model.config.tie_word_embeddings = False
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    for name in CARRIED:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    for written in out.iterdir():  # readable by a server running as another user
        written.chmod(0o644)
    return out


def resolve_merged_model(
    base: Path, adapter: Path, cache_dir: Path, name: str = DEMO_MODEL
) -> tuple[Path, bool]:
    """(`<cache_dir>/<name>-<key[:16]>`, whether this call merged it): merged once under a file
    lock (`merge_adapter` into a staging folder, then renamed), reused after."""
    key = merge_key(base, adapter)
    target = cache_dir / f"{name}-{key[:16]}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / RECORD_NAME).is_file():
            return target, False
        sweep_stale_staging(cache_dir, f".{name}-*")  # what a killed merge left
        staging = merge_adapter(base, adapter, staging_dir(cache_dir, f".{name}-"))
        record = {
            "schema": SCHEMA,
            "key": key,
            "base_model": str(base),
            "base_fingerprint": model_fingerprint(base),
            "adapter": str(adapter),
            "adapter_fingerprint": adapter_fingerprint(adapter),
        }
        atomic_write_json(staging / RECORD_NAME, record)
        if target.exists():  # a folder without its record: an interrupted rename's leftover
            shutil.rmtree(target)
        os.replace(staging, target)
    return target, True


def resolve_demo_model(spec: RunSpec, cache_dir: Path) -> tuple[Path, bool]:
    """The demo policy of `spec` (built or installed when missing) merged into `spec`'s base."""
    base = resolve_model(spec, cache_dir)
    checkpoint = resolve_demo_policy(spec, base, cache_dir)
    return resolve_merged_model(base, checkpoint / "lora_adapter", cache_dir)


def main(argv: list[str] | None = None) -> int:
    """`python -m forge_ppo.recipes._demo_model [--config C] [--cache-dir D]`: the demo policy
    of config C merged into its base, cached in D; prints `DEMO_MODEL_<MERGED|CACHED> path=`."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--config", default="smoke-local", help="the demo policy's config")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/forge"))
    args = parser.parse_args(argv)
    folder, merged = resolve_demo_model(load_spec(args.config), args.cache_dir)
    how = "MERGED" if merged else "CACHED"
    key = json.loads((folder / RECORD_NAME).read_text())["key"]
    print(f"DEMO_MODEL_{how} key={key[:16]} path={folder.resolve()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
