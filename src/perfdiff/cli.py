"""Command line: `main(argv) -> int`, a thin shell over one function per subcommand."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    return 0
