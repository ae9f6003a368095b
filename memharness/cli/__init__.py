"""The ``memharness`` command: ``main`` parses the arguments and runs one subcommand.

``main.py`` holds the parser and the commands of its own; each family of subcommands lives
beside it (``checkpoints``, ``health``, ``llm``, ``own``, ``owning``) and one-line errors for
an unreachable service in ``errors``. The server's, the MCP server's and the benchmarks'
subcommands register from their own packages.
"""

from memharness.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
