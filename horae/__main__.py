"""`python -m horae`: the `horae` command (how `horae dev` starts its components)."""

from horae.cli import main

main()
