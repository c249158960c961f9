"""The terminal the reports print to: its own width on a TTY, 160 columns when piped (make, CI logs)."""

import sys

from rich.console import Console


def wide_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr) if stream.isatty() else Console(stderr=stderr, width=160)
