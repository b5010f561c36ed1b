"""CLI command groups; ``andrea_diag/cli.py`` only wires them into the typer app."""
