"""`perfdiff startup`: the startup-phase table of server logs."""
from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from perfdiff.startup import add_startup_parser

    add_startup_parser(subparsers)
