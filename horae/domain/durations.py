"""Durations as people write them in manifests and on the command line: Go's (and
Kubernetes') notation, `90s`, `5m`, `1h30m`, `2h45m10s`, read into seconds.

Units `h`, `m` and `s`, each at most once, in that order, with whole numbers; no sign, no
fraction, no days (write `744h` for 31 days): the same text the CRD schema's pattern admits
(`DURATION_PATTERN`), so a ScheduledJob, the CLI and the API agree on what is a duration.
"""

from __future__ import annotations

import re

DURATION_PATTERN = r"^([0-9]{1,5}h)?([0-9]{1,7}m)?([0-9]{1,9}s)?$"
"""Whole hours, minutes and seconds, in that order, each optional (one at least)."""
_DURATION = re.compile(DURATION_PATTERN)


def parse_duration(text: str) -> int:
    """`text` (`1h30m`) in seconds; ValueError naming the notation when it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(
            f"{text!r} is not a duration: write whole hours, minutes and seconds such as"
            " 90s, 5m or 1h30m"
        )
    hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def format_duration(seconds: int) -> str:
    """`seconds` in the same notation, largest units first (`5400` -> `1h30m`)."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    parts.append(f"{secs}s" if secs or not (hours or minutes) else "")
    return "".join(parts)
