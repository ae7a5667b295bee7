"""The Dockerfile's install steps, without Docker: horae's wheel built with the build lock
alone, then a fresh environment given the runtime lock (`pip install --require-hashes
--no-deps`, every file checked against its hash) and the wheel (`--no-deps`). `pip check`
finds nothing missing, every horae module imports and `horae` runs: the lock holds all
that the image needs, dev-only packages none of it. About 30 s with pip's cache warm;
needs the package index (skipped, saying so, where it cannot be reached)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _index_unreachable() -> str | None:
    try:
        urllib.request.urlopen(f"{INDEX}/pip/", timeout=15).close()
    except OSError as exc:
        return f"the package index {INDEX} cannot be reached: {exc}"
    return None


pytestmark = pytest.mark.skipif(
    (reason := _index_unreachable()) is not None, reason=f"image install: {reason}"
)


def run(*args: str | Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in args], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=240, check=False)  # fmt: skip
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, f"{' '.join(map(str, args))}:\n{output}"
    return result.stdout


def venv(path: Path) -> Path:
    """A fresh environment with nothing but pip (as the image's Python); its bin/."""
    run(sys.executable, "-m", "venv", path)
    return path / "bin"


@pytest.mark.timeout(600)
def test_the_runtime_lock_installs_with_hashes_and_runs_horae(tmp_path: Path) -> None:
    # What the build stage copies, as its context: the build writes beside the sources.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source)
    shutil.copytree(REPO / "horae", source / "horae",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip

    def build_wheel() -> Path:
        build = venv(tmp_path / "build")
        run(build / "pip", "install", "--require-hashes", "--no-deps", "-r",
            "requirements-build.lock")  # fmt: skip
        run(build / "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
            tmp_path / "wheels", source)  # fmt: skip
        [wheel] = (tmp_path / "wheels").glob("horae-*.whl")
        return wheel

    def install_runtime_lock() -> Path:
        image = venv(tmp_path / "runtime")
        run(image / "pip", "install", "--require-hashes", "--no-deps", "-r",
            "requirements-runtime.lock")  # fmt: skip
        return image

    # The two stages share nothing until the wheel goes in: both at once.
    with ThreadPoolExecutor(max_workers=2) as pool:
        building, installing = pool.submit(build_wheel), pool.submit(install_runtime_lock)
        wheel, image = building.result(), installing.result()
    run(image / "pip", "install", "--no-deps", wheel)
    assert "No broken requirements found." in run(image / "pip", "check")

    # Every module of horae imports with the runtime dependencies alone, and so do the
    # worker image's examples (from its /app, here worker/).
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    imported = run(image / "python", "-c", (
        "import importlib, pkgutil, horae, examples.demo\n"
        "names = [m.name for m in pkgutil.walk_packages(horae.__path__, 'horae.')\n"
        "         if m.name != 'horae.__main__']  # `python -m horae`: runs the command\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), horae.__file__)"
    ), env={**env, "PYTHONSAFEPATH": "1"}).split()  # fmt: skip
    assert int(imported[0]) > 50
    assert imported[1].startswith(str(tmp_path / "runtime")), "horae came from the wheel"
    usage = run(image / "horae", "--help", env=env)
    assert "migrate" in usage and "worker" in usage and "operator" in usage
