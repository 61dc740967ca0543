"""Every ```python block of python/README.md and docs/python.md runs as pasted, imports
included, each in a fresh interpreter from a file of its own (so that a process pool's
``spawn`` and ``forkserver`` workers can import its functions); a block with IPython
magics (``%load_ext``) runs in an IPython shell. Where a ```text block follows a
block, each of its lines must start one line of what the block printed, numbers aside:
the prose shows what the program prints.

A block that cannot run here is marked in the Markdown, just above it, with
``<!-- not run: KEY (why) -->``; KEY must be one of NOT_RUN below, which says why."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, NamedTuple, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "python" / "README.md", ROOT / "docs" / "python.md"]

# The blocks that are not run, by the key of their mark, and why.
NOT_RUN = {
    "ray": "starts a Ray instance (about 10 s and an object store of 1 GiB): too slow for "
    "every CI run; tests/test_ray.py runs the same calls",
}

_MARK = re.compile(r"<!--\s*not run:\s*(\w+)")
_FENCE = re.compile(r"^```(\w*)\s*$")


class Block(NamedTuple):
    document: str
    line: int
    code: str
    expected: Optional[str]
    not_run: Optional[str]


def blocks(path: Path) -> List[Block]:
    """The python blocks of ``path``, each with the text block after it and its mark."""
    lines = path.read_text().splitlines()
    found: List[Block] = []
    fenced = []  # (language, first line, text, mark)
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        language, start = match.group(1), i
        mark = _MARK.search(lines[i - 1]) if i > 0 else None
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        # Only blank lines between this fence and the end of the last one: it follows it.
        fenced.append((language, start, "\n".join(body) + "\n", mark.group(1) if mark else None))
    for n, (language, start, text, mark) in enumerate(fenced):
        if language != "python":
            continue
        expected = None
        if n + 1 < len(fenced) and fenced[n + 1][0] == "text":
            between = lines[_end_of(lines, start) + 1 : fenced[n + 1][1]]
            if all(not line.strip() for line in between):
                expected = fenced[n + 1][2]
        found.append(Block(path.name, start + 1, text, expected, mark))
    return found


def _end_of(lines: List[str], start: int) -> int:
    i = start + 1
    while not lines[i].startswith("```"):
        i += 1
    return i


# .ci/chroots copies tests/ alone: there the documents are not beside the tests.
PRESENT = all(path.exists() for path in DOCUMENTS)
ALL = [block for path in DOCUMENTS for block in blocks(path)] if PRESENT else []
RUN = [block for block in ALL if block.not_run is None]

IPYTHON_RUNNER = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
result = shell.run_cell(open(sys.argv[1]).read())
sys.exit(0 if result.success else 1)
"""

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def pattern(expected_line: str) -> "re.Pattern[str]":
    """A line of the prose's output as a pattern: any number for each number, any run
    of spaces for each run."""
    parts = []
    for piece in re.split(r"(\d[\d,]*(?:\.\d+)?|\s+)", expected_line.strip()):
        if not piece:
            continue
        if _NUMBER.fullmatch(piece):
            parts.append(r"[\d,]+(?:\.\d+)?")
        elif piece.isspace():
            parts.append(r"\s+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def unprinted(expected: str, printed: str) -> List[str]:
    """The lines of ``expected`` that start no line of ``printed``, numbers aside. As in
    a doctest, ``...`` stands for what varies: a line of its own is skipped, and a line
    that ends with it is matched up to it."""
    out = [line.strip() for line in printed.splitlines()]
    missing = []
    for line in expected.splitlines():
        wanted = line.strip()
        if wanted.endswith("..."):
            wanted = wanted[:-3].rstrip()
        if wanted and not any(pattern(wanted).match(o) for o in out):
            missing.append(line)
    return missing


@pytest.mark.skipif(not PRESENT, reason="README.md and docs/python.md are not beside the tests")
def test_every_block_is_found_and_every_mark_has_a_reason():
    assert {b.document for b in ALL} == {"README.md", "python.md"}, ALL
    assert len([b for b in ALL if b.document == "README.md"]) >= 6
    for b in ALL:
        assert b.not_run is None or b.not_run in NOT_RUN, f"{b.document}:{b.line}: no reason for {b.not_run!r}"


def test_the_output_check_reads_numbers_as_numbers():
    assert not unprinted("after del:    +9 MiB", "after del:    +12 MiB\n")
    assert unprinted("after del: +9 MiB", "after del: +9 GiB\n") == ["after del: +9 MiB"]
    assert unprinted("a\nb 1.5", "a\n") == ["b 1.5"]
    assert not unprinted("a 2 ...\n...", "a 3 b c\n")


@pytest.mark.parametrize("block", RUN, ids=[f"{b.document}:{b.line}" for b in RUN])
def test_block_runs_as_pasted(block: Block, tmp_path: Path):
    # A block of an integration whose package is not installed here (.ci/python installs
    # them all) is skipped, saying which.
    for name in re.findall(r"^(?:from|import) (\w+)", block.code, re.M):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{block.document}:{block.line} needs {name}, not installed here")
    script = tmp_path / "example.py"
    script.write_text(block.code)
    magics = any(line.startswith("%") for line in block.code.splitlines())
    if magics:
        pytest.importorskip("IPython")
        command = [sys.executable, "-c", IPYTHON_RUNNER, str(script)]
    else:
        command = [sys.executable, str(script)]
    env = {k: v for k, v in os.environ.items() if k != "ARENAPOOL"}
    out = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    where = f"{block.document}:{block.line}"
    assert out.returncode == 0, f"{where} failed:\n{textwrap.indent(block.code, '    ')}\n{out.stdout}\n{out.stderr}"
    assert "Traceback" not in out.stdout + out.stderr, f"{where}:\n{out.stdout}\n{out.stderr}"
    if block.expected is not None:
        missing = unprinted(block.expected, out.stdout)
        assert not missing, f"{where} printed\n{out.stdout}\nwithout the lines the prose shows:\n" + "\n".join(missing)
