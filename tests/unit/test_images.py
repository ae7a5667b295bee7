"""The images install only what the locks pin, each file checked against its sha256; the
runtime lock is exactly horae's runtime dependencies, as the tests run them; the build
context holds only what the Dockerfile copies. Read from the files, no Docker needed
(tests/e2e/test_image_install.py runs the Dockerfile's install steps)."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = ("requirements.lock", "requirements-runtime.lock", "requirements-build.lock")


@dataclass(frozen=True)
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]]
    """(INSTRUCTION, its arguments), continued lines joined."""


def stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name, in order."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, args = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            base, *rest = args.split()
            name = rest[-1] if rest else str(len(found))
            current = found[name] = Stage(name, base, [])
        elif current is not None:
            current.instructions.append((instruction.upper(), args.strip()))
    return found


def runs(stage: Stage) -> list[list[str]]:
    """The stage's RUN commands, each `&&`-joined command on its own."""
    return [
        shlex.split(command)
        for instruction, args in stage.instructions
        if instruction == "RUN"
        for command in args.split("&&")
    ]


def lock_lines(name: str) -> list[tuple[Requirement, list[str]]]:
    """A lock's lines: each pin's requirement (`Name[extras]==version`) and its options."""
    text = re.sub(r"\\\n", " ", (REPO / name).read_text())
    specs = [line.split() for line in text.splitlines() if line.strip() and line[0] != "#"]
    return [(Requirement(spec), options) for spec, *options in specs]


def lock(name: str) -> dict[NormalizedName, tuple[Version, list[str]]]:
    """A lock's pins: name -> (version, sha256 hashes)."""
    pins = {}
    for req, options in lock_lines(name):
        [pinned] = req.specifier
        assert pinned.operator == "==", f"{name}: {req} is not pinned"
        hashes = [o.removeprefix("--hash=sha256:") for o in options]
        assert all(o.startswith("--hash=sha256:") for o in options), f"{name}: {req} {options}"
        pins[canonicalize_name(req.name)] = (Version(pinned.version), hashes)
    return pins


@dataclass(frozen=True)
class Closure:
    versions: dict[NormalizedName, Version]
    extras: dict[NormalizedName, set[str]]
    """The extras the dependents ask each dependency for (empty: none)."""


def installed_closure(root: str, extras: frozenset[str] = frozenset()) -> Closure:
    """`root`'s dependencies (with `extras`), recursively, as installed here (extras
    followed, markers evaluated for this interpreter): what horae runs on in the tests."""
    found: dict[NormalizedName, Version] = {}
    asked: dict[NormalizedName, set[str]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, extras)]
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (canonicalize_name(name), wanted) in seen:
            continue
        seen.add((canonicalize_name(name), wanted))
        for text in distribution(name).requires or []:
            req = Requirement(text)
            env = {**default_environment(), "extra": ""}
            if req.marker and not any(
                req.marker.evaluate({**env, "extra": e}) for e in (wanted or {""})
            ):
                continue
            dep = distribution(req.name)
            found[canonicalize_name(req.name)] = Version(dep.version)
            asked.setdefault(canonicalize_name(req.name), set()).update(req.extras)
            todo.append((req.name, frozenset(req.extras)))
    return Closure(found, asked)


def test_each_image_installs_only_locked_files_checked_against_their_hashes() -> None:
    found = stages()
    assert {"build", "runtime", "worker", "horae"} <= found.keys()
    assert list(found)[-1] == "horae", "the Horae image is the default target (the last)"
    assert found["worker"].base == found["horae"].base == "runtime"
    pips = {name: [c for c in runs(s) if c[:1] == ["pip"]] for name, s in found.items()}
    # The build tools, then horae's wheel with them alone (no isolated build environment,
    # which would fetch setuptools unpinned).
    assert pips["build"][0][:2] == ["pip", "install"]
    assert {"--require-hashes", "--no-deps"} <= set(pips["build"][0])
    assert pips["build"][0][-2:] == ["-r", "requirements-build.lock"]
    assert pips["build"][1][:2] == ["pip", "wheel"]
    assert {"--no-deps", "--no-build-isolation"} <= set(pips["build"][1])
    # The runtime dependencies from their lock, then horae's wheel adding nothing, checked.
    install_deps, install_horae, check = pips["runtime"]
    assert {"--require-hashes", "--no-deps"} <= set(install_deps)
    assert install_deps[-1].endswith("requirements-runtime.lock")
    assert install_deps[-2] == "-r"
    assert "--no-deps" in install_horae and install_horae[-1] == "/wheels/*.whl"
    assert check == ["pip", "check"]
    # Nothing else installs anything.
    assert not pips["worker"] and not pips["horae"]


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_pins_each_package_to_one_version_with_its_hashes(name: str) -> None:
    pins = lock(name)
    assert pins
    for package, (_, hashes) in pins.items():
        assert hashes, f"{name}: {package} has no hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{name}: {package}"


def test_the_runtime_lock_is_exactly_horaes_runtime_dependencies_as_installed() -> None:
    runtime = lock("requirements-runtime.lock")
    installed = installed_closure("horae").versions
    assert sorted(runtime) == sorted(installed), "run `make lock`"
    differ = [
        f"{name}: lock {runtime[name][0]}, venv {version}"
        for name, version in installed.items()
        if runtime[name][0] != version
    ]
    assert not differ, f"the image would not run what the tests run: {differ}; `make lock`"
    everything = lock("requirements.lock")
    assert {name: everything[name] for name in runtime} == runtime


@pytest.mark.parametrize(
    ("name", "extras"),
    [("requirements.lock", frozenset({"dev"})), ("requirements-runtime.lock", frozenset())],
)
def test_a_dependency_asked_for_with_extras_is_pinned_with_them(
    name: str, extras: frozenset[str]
) -> None:
    # pip-audit asks for `CacheControl[filecache]>=0.13.0`: pinned as `CacheControl==0.14.4`,
    # a fresh venv's pip (23.2, `make venv`) took that as unpinned once 0.15.0 was on the
    # index, and refused the whole lock under --require-hashes.
    pinned = {canonicalize_name(req.name): req.extras for req, _ in lock_lines(name)}
    asked = installed_closure("horae", extras).extras
    missing = {dep: sorted(want - pinned[dep]) for dep, want in asked.items() if want - pinned[dep]}
    assert not missing, f"{name}: pins without the extras asked for: {missing}; `make lock`"


def test_the_build_lock_holds_what_pyproject_builds_horae_with() -> None:
    build = lock("requirements-build.lock")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for text in pyproject["build-system"]["requires"]:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in build, f"requirements-build.lock lacks {name}: `make lock`"
        assert req.specifier.contains(build[name][0]), f"{name} {build[name][0]}: {req}"


def docker_ignores(path: str) -> bool:
    """Whether .dockerignore leaves `path` out of the build context: the last pattern that
    matches it or a directory above it decides (Docker's rule); `!` includes again."""
    ignored = False
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        regex = re.escape(pattern.lstrip("!").strip("/"))
        regex = regex.replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]").replace(r"\[", "[").replace(r"\]", "]")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(re.fullmatch(regex, p) for p in prefixes):
            ignored = not negated
    return ignored


def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_else() -> None:
    copied = [
        source
        for stage in stages().values()
        for instruction, args in stage.instructions
        if instruction == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    ]
    assert copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert not docker_ignores(source), f".dockerignore leaves out {source}"
    assert not docker_ignores("horae/cli/main.py")
    assert not docker_ignores("worker/examples/demo.py")
    left_out = [
        ".git/HEAD", ".venv/bin/python", "tests/unit/test_images.py", "bench/results/x.json",
        "charts/horae/values.yaml", ".mypy_cache/x", ".ruff_cache/x", "horae/__pycache__/x.pyc",
        "horae/cli/__pycache__/main.cpython-311.pyc", "horae/store/x.pyc", "requirements.lock",
    ]  # fmt: skip
    assert [p for p in left_out if not docker_ignores(p)] == []
