"""Where the named task sets built on a machine live, so every package finds them without
importing the one that builds them: `realrepo`, the real-repository tier (`forge-data realrepo
build`, `nox -s synth`), a frozen split folder with its task folders in `tasks/`.

    $FORGE_REALREPO, else <cache>/realrepo (cache: $FORGE_CACHE, else .cache/forge)
        split/            the frozen split (manifest.json, train/validation/test, tasks/)
        tier.json         what was built, from which tier spec (its fingerprint)
"""

from __future__ import annotations

import os
from pathlib import Path

REALREPO = "realrepo"


def forge_cache_dir() -> Path:
    """$FORGE_CACHE, else `.cache/forge` (relative to the working directory, as the CLIs)."""
    return Path(os.environ.get("FORGE_CACHE") or ".cache/forge")


def realrepo_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The real-repository tier's folder: $FORGE_REALREPO, else `<cache>/realrepo`."""
    if os.environ.get("FORGE_REALREPO"):
        return Path(os.environ["FORGE_REALREPO"])
    return (Path(cache_dir) if cache_dir is not None else forge_cache_dir()) / REALREPO


def realrepo_split_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The tier's frozen split folder (its task folders in `tasks/`)."""
    return realrepo_dir(cache_dir) / "split"
