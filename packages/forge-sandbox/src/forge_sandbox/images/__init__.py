"""forge_sandbox.images: task images for image-based backends (BuildKit, private registry).

    from forge_sandbox.images import ImagesConfig, plan_images, build_images, check_images
    config = ImagesConfig.load("images.toml")
    plan = plan_images(discover_tasks("tasks"), config, Registry(config).tags)   # quota first
    report = build_images(plan, config)        # buildctl over mTLS, push
    check = check_images(plan, config)         # manifest HEAD -> digest, per image

CLI: `forge-sandbox images plan | build | check`.
"""

from forge_sandbox.images._build import (
    REPORT_SCHEMA,
    build_images,
    buildctl_argv,
    check_images,
    mtls_problems,
    write_report,
)
from forge_sandbox.images._config import BuildKitConfig, ImagesConfig, ImagesError
from forge_sandbox.images._dockerfile import rewrite_base, rewrite_dockerfile
from forge_sandbox.images._plan import ImagePlan, ImageRow, plan_images, shard, tag_for
from forge_sandbox.images._registry import MANIFEST_TYPES, Registry, RegistryError

__all__ = [
    "MANIFEST_TYPES",
    "REPORT_SCHEMA",
    "BuildKitConfig",
    "ImagePlan",
    "ImageRow",
    "ImagesConfig",
    "ImagesError",
    "Registry",
    "RegistryError",
    "build_images",
    "buildctl_argv",
    "check_images",
    "mtls_problems",
    "plan_images",
    "rewrite_base",
    "rewrite_dockerfile",
    "shard",
    "tag_for",
    "write_report",
]
