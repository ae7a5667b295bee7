"""Print the pinned closure of horae's runtime and dev dependencies as installed in this
environment (for requirements.lock): packages installed for other purposes (benchmarks,
profilers) are left out. Run by `make lock`."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution

from packaging.markers import default_environment
from packaging.requirements import Requirement


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def closure(root: str, extras: set[str]) -> dict[str, str]:
    pinned: dict[str, str] = {}
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
            if key not in pinned or req.extras:
                pinned[key] = f"{dep.metadata['Name']}=={dep.version}"
                todo.append((dep.metadata["Name"], frozenset(req.extras)))
    return pinned


if __name__ == "__main__":
    for _, line in sorted(closure("horae", {"dev"}).items()):
        print(line)
