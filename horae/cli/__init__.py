"""The `horae` command line: components (`main`), jobs (`jobs`), what the store holds
(`views`), and what every command shares (`support`: settings, one-line errors,
output formats). Nothing here is imported by the components."""

from __future__ import annotations

from horae.cli.main import app, main

__all__ = ["app", "main"]
