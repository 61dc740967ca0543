"""Shared helpers: a test that measures the process's memory runs its program in a
fresh interpreter, so that nothing else the test run did is in its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, Optional

import pytest

MiB = 1 << 20


def run_fresh(code: str, env: Optional[Dict[str, str]] = None, timeout: float = 600) -> Any:
    """Runs ``code`` in a fresh interpreter; returns the JSON of its last line of output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        pytest.fail(f"the program failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# What every fresh program measuring RSS starts with.
RSS_HELPER = """
import gc, json, os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
"""
