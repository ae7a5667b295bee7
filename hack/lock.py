"""`make lock`: horae's dependencies pinned, in three files (written only once all three
could be made; run in the venv `make venv` builds):

- requirements.lock: the runtime and dev closure as installed here by
  `pip install -e '.[dev]'` (packages installed for other purposes, benchmarks or
  profilers, left out): what the tests run on, and what `make audit` reads;
- requirements-runtime.lock: the runtime closure alone, for the image's
  `pip install --require-hashes --no-deps` (Dockerfile);
- requirements-build.lock: what builds horae's wheel in the image, pyproject.toml's
  [build-system] requires as pip resolves them now (newest matching).

Each pin is followed by the sha256 of every file of that release on the index (each
platform's wheels and the sdist), so that any platform's install verifies.
The hashes are read from the index's JSON simple API (PEP 691): $PIP_INDEX_URL, else PyPI.
The runtime closure is evaluated for this interpreter and platform (CPython 3.11 on Linux,
as in the image).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
REGENERATE = "Regenerate with `make lock` (hack/lock.py)"


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def closure(root: str, extras: set[str]) -> dict[str, str]:
    """`root`'s dependencies with `extras`, recursively, as installed: normalized name ->
    `Name==version`, or `Name[extra,...]==version` when a dependent asks for it with extras.
    (pip's --require-hashes takes a dependency asked for with extras, such as pip-audit's
    `CacheControl[filecache]>=0.13.0`, as pinned only when the pin names those extras too:
    pinned bare, a fresh venv's pip 23.2 looked for the newest release and refused the lock.)"""
    found: dict[str, tuple[str, str]] = {}  # normalized name -> (Name, version)
    asked: dict[str, set[str]] = {}
    todo = [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        dist = distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            env = default_environment()
            if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in (wanted or {""})
            ):
                continue
            try:
                dep = distribution(req.name)
            except PackageNotFoundError:
                continue  # an optional dependency this platform does not install
            key = _name(dep.metadata["Name"])
            new = set(req.extras) - asked.get(key, set())
            if key not in found or new:
                found[key] = (dep.metadata["Name"], dep.version)
                asked.setdefault(key, set()).update(req.extras)
                todo.append((dep.metadata["Name"], frozenset(req.extras)))
    extras_of = {key: f"[{','.join(sorted(asked[key]))}]" if asked[key] else "" for key in found}
    return {key: f"{name}{extras_of[key]}=={version}" for key, (name, version) in found.items()}


def build_pins() -> dict[str, str]:
    """pyproject.toml's build requirements as pip resolves them today, installing nothing."""
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        resolved = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                *requires,
            ],
            check=False,
        )
        if resolved.returncode != 0:
            raise SystemExit(f"make lock: pip could not resolve {requires} (its errors above)")
        chosen = json.loads(report.read_text())["install"]
    return {
        _name(p["metadata"]["name"]): f"{p['metadata']['name']}=={p['metadata']['version']}"
        for p in chosen
    }


def release_hashes(pin: str) -> list[str]:
    """The sha256 of every file of the release `pin` (Name[extras]==version) names on the
    index (extras name no other files)."""
    req = Requirement(pin)
    name, [version] = req.name, [s.version for s in req.specifier]
    request = urllib.request.Request(
        f"{INDEX}/{canonicalize_name(name)}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except OSError as exc:
        raise SystemExit(f"make lock: cannot read {request.full_url}: {exc}") from None
    hashes = set()
    for file in files:
        try:
            if file["filename"].endswith(".whl"):
                found = parse_wheel_filename(file["filename"])[1]
            else:
                found = parse_sdist_filename(file["filename"])[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue  # eggs, installers: nothing pip installs
        if found == Version(version) and "sha256" in file.get("hashes", {}):
            hashes.add(file["hashes"]["sha256"])
    if not hashes:
        raise SystemExit(f"make lock: {INDEX} lists no file of {pin}")
    return sorted(hashes)


def hashed(pins: dict[str, str]) -> list[str]:
    """Each pin (in name order) with its release's hashes, as pip's --require-hashes reads."""
    ordered = [pins[key] for key in sorted(pins)]
    with ThreadPoolExecutor(8) as pool:
        all_hashes = list(pool.map(release_hashes, ordered))
    return [
        " \\\n    ".join([pin, *(f"--hash=sha256:{h}" for h in hashes)])
        for pin, hashes in zip(ordered, all_hashes, strict=True)
    ]


def main() -> None:
    dev = closure("horae", {"dev"})
    runtime = closure("horae", set())
    build = build_pins()
    files = {
        "requirements.lock": (
            "horae's runtime + dev dependencies, pinned as installed by pip install -e '.[dev]',",
            "each with the sha256 of every file of its release.",
            f"{REGENERATE}; `make audit` checks it.",
            dev,
        ),
        "requirements-runtime.lock": (
            "horae's runtime dependencies alone (CPython 3.11 on Linux), as in requirements.lock:",
            "what the Dockerfile installs (pip install --require-hashes --no-deps).",
            f"{REGENERATE}.",
            runtime,
        ),
        "requirements-build.lock": (
            "What builds horae's wheel in the Dockerfile: pyproject.toml's [build-system]",
            "requires as resolved when locked, each with the sha256 of every file of its release.",
            f"{REGENERATE}; `make audit` checks it.",
            build,
        ),
    }
    texts = {
        name: "".join(f"# {line}\n" for line in header) + "\n".join(hashed(pins)) + "\n"
        for name, (*header, pins) in files.items()
    }
    for name, text in texts.items():  # all three read from the index before any is written
        (REPO / name).write_text(text)
        print(f"make lock: {name}: {len(files[name][-1])} packages")


if __name__ == "__main__":
    main()
