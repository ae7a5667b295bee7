"""Horae's domain core: the rules every entry point applies, written once.

The API, the CLI and the operator each accept jobs; they all call this package, so a job
one of them refuses is refused by the others for the same reason, in the same words:

- `limits`: the bounds of a job's fields (the models and the CRD schema state the same
  numbers) and the checks a field bound cannot express: payload size, `run_at` lateness,
  NUL characters.
- `instants`: the range every instant a caller gives must lie in, and how instants are
  written in Kubernetes objects.
- `fields`: a pydantic validation error as a field path and a message.
- `durations`: durations as manifests and the CLI write them (`1h30m`).

Pure functions and constants: no I/O, no clock reading (callers pass `now`), and no
import of a driver, a client or a web framework (import-linter keeps it so).
"""
