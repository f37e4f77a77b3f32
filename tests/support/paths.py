"""Where things are: the checkout, the tests, the entries launched by path, this Python."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent  # the checkout
ENTRIES = TESTS / "support" / "entries"  # small trainers and probes launched by path
USER_SCRIPTS = TESTS / "user_scripts"  # users' own scripts, run as users run them
PYTHON = sys.executable
