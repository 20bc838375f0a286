"""The test harness's files in the working tree: the agent's changes to them are not carried.

On a task whose tests run in the same process as the code under test (pytest on a SWE-bench,
SWE-Gym, SWE-smith or synthesised task), a plugin that rewrites every report to "passed" makes
pytest itself print `PASSED tests/a.py::test_b`: no output check can tell that from a real pass.
pytest loads such a plugin from files in the repository that a fix never needs to change, so
the fresh verifier sandbox keeps those files as the task shipped them (an added one is left out,
a deleted or changed one stays the task's), and change-audit.json lists them under `kept`:

    by name, anywhere   conftest.py, pytest.ini, .pytest.ini, pytest.toml, .pytest.toml,
                        sitecustomize.py, usercustomize.py, *.pth, setup.py and
                        setup_package.py (an install at verify time runs them);
                        JavaScript's runner configs
                        (.mocharc.*, jest / vitest / vite / karma / ava / babel config, .babelrc,
                        .swcrc, .nycrc, .c8rc), their setup files (setupTests.*, jest.setup.*,
                        vitest.setup.*, test-setup.*), the package managers' rc files
                        (.npmrc, .yarnrc*, bunfig) and their code and maps in the tree
                        (.pnp.cjs, .pnp.loader.mjs, .pnpmfile.cjs)
    by folder           anything under a *.dist-info or *.egg-info folder (a `pytest11` entry
                        point is loaded as a plugin) or a site-packages / dist-packages /
                        node_modules / .yarn folder (the dependencies in the working tree: the
                        runner's own code among them; yarn's release, plugins and zip cache)
    by content          setup.cfg, tox.ini, pyproject.toml (pytest's part, the build system,
                        scripts, entry points, build hooks), package.json and the lockfiles
                        (package-lock.json, npm-shrinkwrap.json, yarn.lock, pnpm-lock.yaml,
                        bun.lock; bun's binary bun.lockb is kept by name): a
                        change is carried only when the runner's part of the file is unchanged
                        (`runner_part`: pytest's sections; package.json's scripts, runner and
                        workspace keys and its dependencies from anywhere but the registry; a
                        lockfile's non-registry sources); never a deletion
    by shadowing        a new module, package or extension (`inspect.so`,
                        `unittest.cpython-311-x86_64-linux-gnu.so`: imported before a source)
                        named as the runner's (pytest, _pytest, pluggy,
                        ...) or the standard library's (any Python 3's: a module removed since
                        3.5 counts), in a folder that is not a package: the
                        working tree's root comes first on sys.path under `python -m pytest`
                        (a script's folder under `python tests/runtests.py`), so a new
                        `pytest/__main__.py` there would be the runner

Where the task's gold patch is known (`_testside.py`) and changes such a file, the file is
the answer's too: the agent's version is carried when it is exactly the gold's (a config file;
for a file judged by content, when its runner part is the task's or the gold's), and a deletion
the gold makes is carried (`_gold.py`).

The code under test can still reach the runner from inside its process (patching `_pytest`
from an imported module); that is flagged by the change audit (`change_test_framework`), and
Forge's own demo tasks run their code in a worker process the tests never import.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import sys
import tarfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_sandbox._errors import SandboxTransferError
from forge_sandbox.verify._gold import FileDiff, GoldPatchError, apply_file_diff
from forge_sandbox.verify._testside import MODULE_FILE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from forge_sandbox._protocol import Sandbox
    from forge_sandbox.verify._transfer import Change, Manifest

HARNESS_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "sitecustomize.py",
        "usercustomize.py",
        # run by an install at verify time (SWE-bench's eval script runs the row's `install`,
        # `pip install -e .`, after the change and before the tests): code with the verifier's
        # rights, before the runner starts (astropy's build reads each setup_package.py)
        "setup.py",
        "setup_package.py",
        # the package managers' own code and resolution maps in the tree: yarn's PnP maps,
        # pnpm's install hooks (they rewrite any package's manifest at install)
        ".pnp.cjs",
        ".pnp.js",
        ".pnp.loader.mjs",
        ".pnpmfile.cjs",
        # bun's binary lockfile (before bun 1.2's text bun.lock): its sources cannot be read,
        # so only the gold's version is carried
        "bun.lockb",
    }
)
# JavaScript's runners read these (mocha, jest, vitest / vite, karma, ava, babel, nyc), and
# npm, yarn and bun read their rc files before `npm test` (`node-options=--require ./x.js`)
JS_HARNESS = re.compile(
    r"^(\.mocharc|jest\.config|vitest\.config|vitest\.workspace|vite\.config|karma\.conf|"
    r"ava\.config|babel\.config|\.babelrc|\.swcrc|\.nycrc|\.c8rc|\.npmrc|\.yarnrc|bunfig|"
    # the setup files a runner's config loads into every test (jest's setupFiles, CRA's
    # src/setupTests.js, vitest's setupFiles): they run before each test file
    r"setupTests|setup-tests|jest[.-]setup|vitest[.-]setup|test-setup|testSetup)(\.[\w.]+)?$"
)
# `.yarn`: yarn's own release (`yarnPath`), its plugins, patches and zip cache of every
# dependency (`yarn test` runs the release in the tree)
HARNESS_FOLDERS = frozenset({"site-packages", "dist-packages", "node_modules", ".yarn"})
HARNESS_SUFFIXES = (".dist-info", ".egg-info")
LOCKFILES = frozenset(
    {"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lock"}
)
SHARED_CONFIG = frozenset({"setup.cfg", "tox.ini", "pyproject.toml", "package.json"}) | LOCKFILES
# pip's requirement files (requirements.txt, requirements-dev.txt, requirements/test.txt, ...)
_REQUIREMENTS = re.compile(r"(^|/)requirements[^/]*\.(txt|in)$|(^|/)requirements/[^/]+\.(txt|in)$")
# a requirement from anywhere but the package index: a direct reference (`name @ url`), a path,
# a VCS or file URL, an editable install, another index or a find-links folder
_PY_SOURCE = re.compile(
    r"@\s*\S|^\s*(?:-e\b|--editable\b|-i\b|--index-url\b|--extra-index-url\b|-f\b|"
    r"--find-links\b|-c\b|--constraint\b|-r\b|--requirement\b|\.|/|~)"
    r"|\b(?:file|git\+\w+|hg\+\w+|svn\+\w+|bzr\+\w+|https?):",
    re.MULTILINE,
)
# what a runner reads from package.json: `npm test` runs scripts.test; the others configure one;
# what decides which code an install at verify time puts in node_modules (95 of SWE-gen-JS's
# test.sh scripts reinstall: `npm install`, `yarn install`, `pnpm install`)
PACKAGE_JSON_RUNNER_KEYS = (
    "scripts",
    "mocha",
    "jest",
    "ava",
    "babel",
    "c8",
    "nyc",
    "vitest",
    "workspaces",
    "packageManager",
    "pnpm",
    "patchedDependencies",
)
# what pytest reads from pyproject.toml, and what an install at verify time runs or installs
# from it: the build backend (`backend-path` puts the tree's own module there), console
# scripts (a `pytest` script would be the runner), entry points (`pytest11`: a plugin), the
# build tools' hooks and custom commands
PYPROJECT_RUNNER_KEYS = (
    "tool.pytest",
    "build-system",
    "project.scripts",
    "project.gui-scripts",
    "project.entry-points",
    "tool.setuptools",
    "tool.hatch.build",
    "tool.pdm.build",
    "tool.poetry.scripts",
    "tool.poetry.plugins",
    "tool.poetry.build",
)
# setup.cfg / tox.ini: from the first line that names pytest, an entry point, a custom command
# or a requirement from a URL or file to the end (an install runs or installs them)
_INI_RUNNER = re.compile(
    r"pytest|entry_points|console_scripts|cmdclass|@\s*(?:file|git\+\w+|https?):", re.IGNORECASE
)
PACKAGE_JSON_DEPENDENCIES = (
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
    "overrides",
    "resolutions",
)
# a dependency from anywhere but the registry: a folder or tarball in the tree, a link, a git
# repository, a URL, an alias to another package, a patched copy
_SOURCE = re.compile(r"^(?:[a-z][\w+.-]*:|\.|~/|/|[\w.-]+/[\w.-]+(?:#|$))")
_LOCK_SOURCE = re.compile(
    r"\b(?:file|link|portal|patch|exec|git\+[a-z]+|git|github|gitlab|bitbucket):[^\s\"',)]+"
    r"|https?://(?!registry\.npmjs\.org/|registry\.yarnpkg\.com/)[^\s\"',)]+"
)
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments", "exceptiongroup",
     "tomli", "nose", "nose2", "xdist", "coverage", "pytest_cov"}
)  # fmt: skip
# The standard library of the task's Python, not the host's: an image may run any Python 3
# (SWE-bench's oldest run 3.5), so the modules removed since then count as well.
REMOVED_STDLIB = frozenset(
    {"macpath", "_dummy_thread", "dummy_threading", "formatter", "parser", "symbol", "binhex",
     "asynchat", "asyncore", "distutils", "imp", "smtpd", "aifc", "audioop", "cgi", "cgitb",
     "chunk", "crypt", "imghdr", "lib2to3", "mailcap", "msilib", "nis", "nntplib",
     "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau", "telnetlib", "uu", "xdrlib"}
)  # fmt: skip
SHADOWED = RUNNER_MODULES | REMOVED_STDLIB | frozenset(sys.stdlib_module_names)
CONFIG_MAX_BYTES = 1 << 20  # a larger shared config file is kept as the task's


def is_harness_path(path: str) -> bool:
    """Whether `path` (relative to the working tree) is one of the harness's own files."""
    parts = posixpath.normpath(path).split("/")
    if parts[-1] in HARNESS_NAMES or parts[-1].endswith(".pth") or JS_HARNESS.match(parts[-1]):
        return True
    return any(p in HARNESS_FOLDERS or p.endswith(HARNESS_SUFFIXES) for p in parts)


def is_shared_config(path: str) -> bool:
    """Whether `path` is a file a runner or an install reads beside other tools' settings
    (carried when its `runner_part` is unchanged)."""
    return posixpath.basename(path) in SHARED_CONFIG or _REQUIREMENTS.search(path) is not None


def runner_part(name: str, data: bytes) -> Any:
    """What a test runner reads from a shared config file, for comparison (ValueError:
    unreadable).

    pyproject.toml: its PYPROJECT_RUNNER_KEYS as tomllib (pytest's own parser) reads them (the
    `tool.pytest` table, the build system, scripts and entry points, build hooks); an empty
    dict without any. setup.cfg / tox.ini: the text from the first line that names pytest, an
    entry point, a console script or a custom command (in any case) to the end: a section
    header always names it, so every line pytest reads from its section is in there, whatever
    quirks an INI parser has. package.json: its
    PACKAGE_JSON_RUNNER_KEYS as JSON reads them (an object, else ValueError), and its
    dependencies from anywhere but the registry (`_sources`). A lockfile: the sources it names
    that are not the registry (a folder, a link, a git repository, another host's tarball): an
    install at verify time would put their code where the runner's is."""
    text = data.decode("utf-8")
    if posixpath.basename(name) == "package.json":
        package = json.loads(text)
        if not isinstance(package, dict):
            raise ValueError("package.json: expected an object")
        part = {key: package[key] for key in PACKAGE_JSON_RUNNER_KEYS if key in package}
        sources = sorted(_sources(package))
        return {**part, "sources": sources} if sources else part
    if posixpath.basename(name) in LOCKFILES:  # yarn's own compat patches are everyone's
        return sorted({m for m in _LOCK_SOURCE.findall(text) if "builtin<compat/" not in m})
    if posixpath.basename(name) == "pyproject.toml":
        table = tomllib.loads(text)
        part = {key: value for key in PYPROJECT_RUNNER_KEYS if (value := _at(table, key))}
        sources = sorted(_py_sources(table))
        return {**part, "sources": sources} if sources else part
    if _REQUIREMENTS.search(name):  # the lines that install from anywhere but the index
        requirements = (line.split(" #", 1)[0].strip() for line in text.splitlines())
        return sorted({r for r in requirements if r[:1] != "#" and _PY_SOURCE.search(r)})
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if _INI_RUNNER.search(line)), len(lines))
    return "".join(lines[first:])


def _py_sources(table: dict[str, Any]) -> set[str]:
    """pyproject's requirements from anywhere but the package index (`name @ url`, paths; PEP
    621 dependencies, optional ones and dependency groups), and uv's `tool.uv.sources`."""
    requirements: list[object] = list(_at(table, "project.dependencies") or [])
    for group in ("project.optional-dependencies", "dependency-groups"):
        for entries in (_at(table, group) or {}).values():
            requirements += entries if isinstance(entries, list) else []
    found = {r.strip() for r in requirements if isinstance(r, str) and _PY_SOURCE.search(r)}
    uv_sources = _at(table, "tool.uv.sources")
    return found | (
        {f"tool.uv.sources {json.dumps(uv_sources, sort_keys=True)}"} if uv_sources else set()
    )


def _at(table: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted key of a TOML table; None where any part is missing."""
    value: Any = table
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _sources(package: dict[str, Any]) -> set[str]:
    """package.json's dependencies from anywhere but the registry (`section name spec`, nested
    overrides flattened); a registry version or range is not one."""
    found: set[str] = set()

    def walk(section: str, entries: object) -> None:
        if not isinstance(entries, dict):
            return
        for name, spec in entries.items():
            if isinstance(spec, dict):
                walk(f"{section}.{name}", spec)
            elif isinstance(spec, str) and _SOURCE.match(spec.strip()):
                found.add(f"{section} {name} {spec.strip()}")

    for section in PACKAGE_JSON_DEPENDENCIES:
        walk(section, package.get(section))
    return found


def _module(name: str) -> str:
    """The module a file or folder name would be imported as ('' for none): a folder (a
    package), a source, or an extension (`json.so`, `json.cpython-311-x86_64-linux-gnu.so`:
    Python's importer takes one before a source of the same name, and before the standard
    library's when its folder comes first on sys.path)."""
    if "." not in name:
        return name
    module = MODULE_FILE.fullmatch(name)  # bytecode never travels (`_transfer.EXCLUDED`)
    return module.group(1) if module is not None else ""


def shadowing(change: Change, before: Manifest, after: Manifest) -> set[str]:
    """New paths of `change` that would shadow the runner or the standard library (see the
    module's docstring), and every path under them."""
    tops = set()
    for path in change.copy:
        parent, name = posixpath.split(path)
        if path in before.entries or _module(name) not in SHADOWED:
            continue
        if not parent or posixpath.join(parent, "__init__.py") not in after.entries:
            tops.add(path)
    return {p for p in change.copy if p in tops or any(p.startswith(t + "/") for t in tops)}


def split_harness(
    change: Change,
    before: Manifest,
    after: Manifest,
    side: Callable[[str], bool] | None = None,
    gold: Mapping[str, FileDiff] | None = None,
) -> tuple[Change, tuple[str, ...]]:
    """The change without the harness's files (by path) and the task's test side (`side`, for
    a task whose gold patch is known: `_testside.py`), without new modules that shadow the
    runner's, and without deletions of shared config files; and the paths left out. A deleted
    folder that held such files becomes the deletion of everything else in it (they stay).
    A harness file the gold patch changes (`gold`) stays in the change, judged by its content
    (`keep_shared_config`); a deletion the gold makes is carried."""
    gold = gold or {}

    def stays(path: str) -> bool:
        return (is_harness_path(path) and path not in gold) or (side is not None and side(path))

    def _harness_related(path: str) -> bool:
        if path in gold and gold[path].deletes:
            return False
        return is_harness_path(path) or (side is not None and side(path)) or is_shared_config(path)

    kept = [p for p in change.copy if stays(p)] + sorted(shadowing(change, before, after))
    delete: list[str] = []
    for path in change.delete:
        if _harness_related(path):
            kept.append(path)
            continue
        inside = sorted(p for p in before.entries if p.startswith(path + "/"))
        held = [p for p in inside if _harness_related(p)]
        if not held:
            delete.append(path)
            continue
        kept += held
        delete += [  # files and links only: a folder holding a kept file stays
            p for p in inside if not _harness_related(p) and before.entries[p].kind != "d"
        ]
    out = set(kept)
    carried = replace(change, copy=tuple(p for p in change.copy if p not in out),
                      delete=tuple(delete))  # fmt: skip
    return carried, tuple(sorted(out))


def _same_runner_part(path: str, before: bytes | None, after: bytes | None) -> bool:
    if after is None or len(after) > CONFIG_MAX_BYTES:
        return False
    try:
        old = runner_part(path, before) if before is not None else None
        new = runner_part(path, after)
    except (UnicodeDecodeError, ValueError):  # tomllib's TOMLDecodeError is a ValueError
        return False
    return bool(old == new or (before is None and not new))


async def _original(
    fresh: Sandbox, workdir: str, path: str, before: Manifest, scratch: Path
) -> bytes | None:
    """The task's own version of `path` (read from the fresh sandbox, which holds the task's
    tree as shipped); None when the task had no file there."""
    entry = before.entries.get(path)
    if entry is None or entry.kind != "f":
        return None
    local = scratch / "config-before" / path.replace("/", "%")
    local.parent.mkdir(parents=True, exist_ok=True)
    try:
        await fresh.download(posixpath.join(workdir, path), local)
    except SandboxTransferError:
        return None  # unreadable there: compared as absent, so only a pytest-free file passes
    return local.read_bytes()


def _gold_version(
    path: str, original: bytes | None, gold: Mapping[str, FileDiff]
) -> tuple[bool, bytes | None]:
    """(whether the gold patch's version of the file is known, that version: None when the
    gold removes it); unknown when the gold does not touch it or its section does not apply."""
    if path not in gold:
        return False, None
    try:
        return True, apply_file_diff(original, gold[path])
    except GoldPatchError:
        return False, None


def _carried(
    path: str, original: bytes | None, after: bytes | None, gold: tuple[bool, bytes | None]
) -> bool:
    """Whether the agent's version (`after`) of a harness or shared config file is carried."""
    known, version = gold
    if is_harness_path(path):  # only the gold's harness files reach here: the gold's bytes
        return known and after is not None and after == version
    if _same_runner_part(path, original, after):
        return True
    return known and version is not None and _same_runner_part(path, version, after)


async def keep_shared_config(
    fresh: Sandbox,
    change: Change,
    workdir: str,
    before: Manifest,
    archive: Path,
    gold: Mapping[str, FileDiff] | None = None,
) -> tuple[Change, tuple[str, ...]]:
    """Leave out of `change` (and of its archive) each shared config file whose runner part
    it changes (from the task's, and from the gold patch's where that changes it), or that it
    turns into another type, and each harness file the gold changes that is not exactly the
    gold's version; return the change and the paths left out."""
    gold = gold or {}
    shared = [p for p in change.copy if is_shared_config(p) or (p in gold and is_harness_path(p))]
    if not shared:
        return change, ()
    with tarfile.open(archive) as tar:
        members = {posixpath.normpath(m.name): m for m in tar.getmembers()}
        after = {}
        for path in shared:
            member = members.get(path)
            handle = tar.extractfile(member) if member is not None and member.isfile() else None
            after[path] = handle.read(CONFIG_MAX_BYTES + 1) if handle is not None else None
    kept = []
    for path in shared:
        original = await _original(fresh, workdir, path, before, archive.parent)
        if not _carried(path, original, after[path], _gold_version(path, original, gold)):
            kept.append(path)
    if not kept:
        return change, ()
    _drop_members(archive, set(kept))
    return replace(change, copy=tuple(p for p in change.copy if p not in kept)), tuple(kept)


def _drop_members(archive: Path, paths: set[str]) -> None:
    """Rewrite `archive` without the members at `paths`."""
    buffer = io.BytesIO()
    with tarfile.open(archive) as old, tarfile.open(fileobj=buffer, mode="w") as new:
        for member in old.getmembers():
            if posixpath.normpath(member.name) not in paths:
                new.addfile(member, old.extractfile(member) if member.isfile() else None)
    archive.write_bytes(buffer.getvalue())
