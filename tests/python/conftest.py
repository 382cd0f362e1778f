"""Shared fixtures for the flywheel Python tests.

Run with PYTHONPATH=<build>/python (`make pytest` sets it). When it is not
set, <repo>/build/python is tried so `pytest tests/python` works after a
default build.
"""

import os
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import flywheel  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(_REPO, "build", "python"))
    import flywheel  # noqa: F401


@pytest.fixture
def table_path(tmp_path):
    """A path where a new table can be created."""
    return str(tmp_path / "t")
