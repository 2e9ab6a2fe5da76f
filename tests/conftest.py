"""pytest configuration: makes `tests/support.py` importable as `support` for every test layer."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
