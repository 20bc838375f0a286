"""What changed in a task folder: the per-file map comes from forge-gates' `tree_files`
(one hashing rule for forge-data and forge-sandbox), compared here file by file."""

from __future__ import annotations


def diff_files(expected: dict[str, str], found: dict[str, str]) -> dict[str, list[str]]:
    """Which files were added, removed or changed between two `{path: sha256}` maps."""
    return {
        "added": sorted(set(found) - set(expected)),
        "removed": sorted(set(expected) - set(found)),
        "changed": sorted(p for p in set(expected) & set(found) if expected[p] != found[p]),
    }
