"""Kubernetes names and labels derived from trial and task names (pure functions).

A pod name is an RFC 1123 label (lowercase alphanumerics and '-', starting and ending
alphanumeric, <= 63 characters) with a hash suffix, so two trial names that sanitise to the
same text (or share a long prefix) never collide. A label value is kept as it is when it is
already valid, else sanitised, cut and hashed (<= 63 characters).
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
POD_PREFIX = "forge-"
HASH_CHARS = 10
LABEL_HASH_CHARS = 8
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?")


def _digest(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:chars]


def pod_name(trial_name: str) -> str:
    """`forge-<sanitised trial name>-<10 hex of its sha256>`, an RFC 1123 label <= 63 chars."""
    readable = re.sub(r"[^a-z0-9]+", "-", trial_name.lower()).strip("-")
    room = MAX_NAME - len(POD_PREFIX) - 1 - HASH_CHARS
    readable = readable[:room].rstrip("-")
    suffix = _digest(trial_name, HASH_CHARS)
    return f"{POD_PREFIX}{readable}-{suffix}" if readable else f"{POD_PREFIX}{suffix}"


def label_value(value: str) -> str:
    """`value` when it is a valid label value; else sanitised, cut and `-<8 hex>` appended."""
    if len(value) <= MAX_NAME and LABEL_VALUE.fullmatch(value) and "-h-" not in value:
        return value
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)
    readable = re.sub(r"^[^A-Za-z0-9]+", "", readable)
    readable = readable[: MAX_NAME - LABEL_HASH_CHARS - 3]
    readable = re.sub(r"[^A-Za-z0-9]+$", "", readable)
    # '-h-' marks a hashed value, so no valid input can equal another input's hashed form
    return f"{readable or 'x'}-h-{_digest(value, LABEL_HASH_CHARS)}"


def name_problems(name: str, what: str) -> list[str]:
    """Why `name` is not an RFC 1123 label of <= 63 characters ([] when it is)."""
    problems = []
    if len(name) > MAX_NAME:
        problems.append(f"{what} {name!r} has {len(name)} characters (at most {MAX_NAME})")
    if not DNS1123_LABEL.fullmatch(name):
        problems.append(
            f"{what} {name!r} is not an RFC 1123 label (lowercase a-z, 0-9, '-', "
            "alphanumeric at both ends)"
        )
    return problems


def label_problems(labels: dict[str, str]) -> list[str]:
    """Why any label key or value is invalid for Kubernetes ([] when all are valid)."""
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
            problems.append(f"label key {key!r}: prefix is not a DNS subdomain")
        if len(name) > MAX_NAME or not LABEL_NAME.fullmatch(name):
            problems.append(f"label key {key!r}: name part invalid or over {MAX_NAME} chars")
        if len(value) > MAX_NAME or not LABEL_VALUE.fullmatch(value):
            problems.append(f"label {key}={value!r}: value invalid or over {MAX_NAME} chars")
    return problems


def quantity_problems(quantities: dict[str, str], where: str) -> list[str]:
    """Why a resource quantity string is not Kubernetes quantity syntax."""
    return [
        f"{where}.{name} = {value!r} is not a Kubernetes quantity (e.g. '8Gi', '500m', '2')"
        for name, value in quantities.items()
        if not isinstance(value, str) or not QUANTITY.fullmatch(value)
    ]
