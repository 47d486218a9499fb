"""`perfdiff collect`: record a live process into a run bundle."""
from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from perfdiff.collectors.collect import add_collect_parser

    add_collect_parser(subparsers)
