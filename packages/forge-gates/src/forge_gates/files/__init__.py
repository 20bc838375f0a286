"""forge_gates.files: the file helpers every Forge package shares, defined once.

Canonical JSON and content hashes, atomic writes (temp file, fsync, rename), JSON lines that
name `file:line` on a bad line::

    from forge_gates import atomic_write_json, read_jsonl, sha256_canonical
    atomic_write_json("runs/x/summary.json", {"lr": 1.0})
    rows = read_jsonl("runs/x/metrics.jsonl", torn_tail="skip")

`forge_gates` re-exports every name here; import them from there. This layer imports nothing
of forge_gates.
"""

from forge_gates.files._atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    fsync_path,
    staging_dir,
    sweep_stale_staging,
)
from forge_gates.files._canonical import (
    canonical_json,
    file_sha256,
    sha256_canonical,
    sha256_text,
    tree_files,
    tree_sha256,
)
from forge_gates.files._jsonl import (
    JsonLine,
    JsonLinesError,
    append_jsonl,
    iter_jsonl,
    jsonl_line,
    read_jsonl,
)
from forge_gates.files._task_sets import (
    REALREPO,
    forge_cache_dir,
    realrepo_dir,
    realrepo_split_dir,
)

__all__ = [
    "REALREPO",
    "JsonLine",
    "JsonLinesError",
    "append_jsonl",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "canonical_json",
    "file_sha256",
    "forge_cache_dir",
    "fsync_path",
    "iter_jsonl",
    "jsonl_line",
    "read_jsonl",
    "realrepo_dir",
    "realrepo_split_dir",
    "sha256_canonical",
    "sha256_text",
    "staging_dir",
    "sweep_stale_staging",
    "tree_files",
    "tree_sha256",
]
