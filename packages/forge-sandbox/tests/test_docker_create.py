"""A SandboxSpec's limits and identity as the Docker create body, field by field and at the
boundaries (no daemon): the whole body compared to the Engine API fields it must carry, the
exec user when only a uid or only a gid is given, the storage quota only where the driver can
cap it, label and container-name bounds."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from forge_sandbox import SandboxSpec
from forge_sandbox.docker import OWNER_LABEL, DockerConfig, container_name, create_body, labels
from forge_sandbox.docker._create import exec_user, host_config
from forge_sandbox.seccomp import profile_json


def test_the_whole_create_body_of_a_limited_task() -> None:
    spec = SandboxSpec(
        task_name="demo/fix-add",
        trial_name="fix-add__1",
        hostname="box",
        env={"A": "1", "B": "two"},
        memory_mb=256,
        pids_max=64,
        cpus=0.5,
        file_size_mb=3,
        open_files=128,
    )
    config = DockerConfig(owner="ci", cap_add=["CHOWN", "FOWNER"])
    body = create_body(spec, config, "img:7", {"User": "app", "WorkingDir": "/w"}, storage_opt=True)
    assert body == {
        "Image": "img:7",
        "Entrypoint": ["sleep"],
        "Cmd": ["infinity"],
        "User": "65533:65533",
        "WorkingDir": "/",
        "Hostname": "box",
        "Env": ["A=1", "B=two"],
        "Labels": {
            OWNER_LABEL: "ci",
            "forge-sandbox.task": "demo/fix-add",
            "forge-sandbox.trial": "fix-add__1",
        },
        "NetworkDisabled": True,
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "HostConfig": {
            "Init": True,
            "Privileged": False,
            "CapDrop": ["ALL"],
            "CapAdd": ["CHOWN", "FOWNER"],
            "SecurityOpt": ["no-new-privileges", f"seccomp={profile_json()}"],
            "NetworkMode": "none",
            "Memory": 256 << 20,
            "MemorySwap": 256 << 20,
            "PidsLimit": 64,
            "NanoCpus": 500_000_000,
            "Ulimits": [
                {"Name": "fsize", "Soft": 3 << 20, "Hard": 3 << 20},
                {"Name": "nofile", "Soft": 128, "Hard": 128},
                {"Name": "core", "Soft": 0, "Hard": 0},
            ],
            "OomScoreAdj": 500,
            "ReadonlyRootfs": False,
            "AutoRemove": False,
        },
    }
    assert json.loads(body["HostConfig"]["SecurityOpt"][1].removeprefix("seccomp="))


@pytest.mark.parametrize(
    ("storage_opt", "storage_mb", "expected"),
    [(True, 300, {"size": "300M"}), (True, None, None), (False, 300, None), (False, None, None)],
)
def test_the_storage_quota_needs_both_a_capable_driver_and_a_spec_size(
    storage_opt, storage_mb, expected
) -> None:
    host = host_config(SandboxSpec(storage_mb=storage_mb), DockerConfig(), storage_opt=storage_opt)
    assert host.get("StorageOpt") == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"uid": 1234}, "1234:1000"),  # either id given explicitly pins both
        ({"gid": 77}, "1000:77"),
        ({"uid": 5, "gid": 6}, "5:6"),
        ({}, "app"),  # neither: the image's USER
    ],
)
def test_an_explicit_uid_or_gid_alone_names_the_exec_user(fields, expected) -> None:
    spec = SandboxSpec(**fields)
    defaults = SandboxSpec()
    assert (defaults.uid, defaults.gid) == (1000, 1000), "the defaults this test assumes"
    assert exec_user({"User": "app"}, spec, DockerConfig()) == expected


def test_a_task_user_wins_over_ids_and_the_image() -> None:
    assert exec_user({"User": "app"}, SandboxSpec(user="tester", uid=5), DockerConfig()) == "tester"
    assert exec_user({"User": None}, SandboxSpec(), DockerConfig()) == "0"


def test_labels_are_kept_up_to_200_characters_then_cut_and_hashed() -> None:
    for length in (199, 200):
        value = "t" * length
        assert labels(SandboxSpec(task_name=value), DockerConfig())["forge-sandbox.task"] == value
    long = "u" * 201
    digest = hashlib.sha256(long.encode()).hexdigest()[:10]
    cut = labels(SandboxSpec(trial_name=long), DockerConfig())["forge-sandbox.trial"]
    assert cut == "u" * 188 + "-" + digest and len(cut) == 199
    bare = labels(SandboxSpec(task_name="", trial_name=None), DockerConfig(owner="me"))
    assert bare == {OWNER_LABEL: "me"}


@pytest.mark.parametrize(
    ("trial", "task", "expected"),
    [
        ("-.fix add._", "t", "forge-fix-add-abcd"),  # unsafe runs become '-', ends stripped
        (None, "demo/x", "forge-demo-x-abcd"),
        (None, None, "forge-sandbox-abcd"),
        ("__", None, "forge-sandbox-abcd"),  # nothing left after stripping
        ("-._-", None, "forge-sandbox-abcd"),
        ("a" * 60, None, f"forge-{'a' * 40}-abcd"),
        ("X-fix-X", None, "forge-X-fix-X-abcd"),  # only '-', '.', '_' are stripped
    ],
)
def test_container_names_are_sanitised_and_bounded(trial, task, expected) -> None:
    assert container_name(SandboxSpec(trial_name=trial, task_name=task), "abcd") == expected


def test_a_container_name_without_suffix_gets_8_random_hex_digits() -> None:
    first = container_name(SandboxSpec(trial_name="t"))
    second = container_name(SandboxSpec(trial_name="t"))
    assert re.fullmatch(r"forge-t-[0-9a-f]{8}", first) and first != second
