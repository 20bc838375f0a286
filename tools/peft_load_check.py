"""`python tools/peft_load_check.py CHECKPOINT`: PEFT loads the checkpoint's adapter onto its
base model (`PeftModel.from_pretrained`) with exactly the saved tensors; prints
PEFT_ADAPTER_LOAD_PASSED or exits 1 naming what differs. Used by `nox -s verl`."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    folder = Path(argv[0]) / "lora_adapter"
    config = json.loads((folder / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(
        config["base_model_name_or_path"], local_files_only=True
    )
    model = PeftModel.from_pretrained(base, str(folder))
    loaded = get_peft_model_state_dict(model)
    saved = load_file(str(folder / "adapter_model.safetensors"))
    bad = sorted(k for k in saved if k not in loaded or not torch.equal(loaded[k], saved[k]))
    if bad or set(loaded) != set(saved):
        print(
            f"expected PEFT to load every saved tensor of {folder}; found differences in "
            f"{bad[:5]} (keys {len(loaded)} vs {len(saved)}); fix: re-save the adapter",
            file=sys.stderr,
        )
        return 1
    print(f"PEFT_ADAPTER_LOAD_PASSED tensors={len(saved)} r={config['r']} path={folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
