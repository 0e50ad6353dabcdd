"""The shape rules of issue 26 that no linter here checks: no function in bkfast/ over 60 lines (Python and
Cython), generated protobuf modules aside."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import REPO

PACKAGE = REPO / "bkfast"
MAX_LINES = 60
_CYTHON_DEF = re.compile(r"^(\s*)(?:cpdef|cdef|def)\s+.*?(\w+)\s*\(")
_CYTHON_NOT_A_FUNCTION = re.compile(r"^\s*cdef\s+(?:class|struct|enum|extern|packed|public\s+class)\b")


def python_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every def in a Python file, nested ones included."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None]


def cython_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every def/cdef/cpdef function: from its line to the last line indented
    deeper than it (a signature continued on the next lines counts as the function's)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _CYTHON_DEF.match(line)
        if not m or _CYTHON_NOT_A_FUNCTION.match(line) or "=" in line.split("(", 1)[0]:
            continue
        indent, end = len(m.group(1)), i + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent
                                    or lines[end].lstrip().startswith(")")):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        found.append((m.group(2), i + 1, end - i))
    return found


def long_functions() -> list[str]:
    long = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.name.endswith(("_pb2.py", "_pb2.pyi")) or "build" in path.parts:
            continue
        if path.suffix == ".py":
            functions = python_functions(path)
        elif path.suffix in (".pyx", ".pxi", ".pxd"):
            functions = cython_functions(path.read_text())
        else:
            continue
        long += [f"{path.relative_to(REPO)}:{line} {name} ({n} lines)" for name, line, n in functions if n > MAX_LINES]
    return long


def test_no_function_in_the_package_is_over_60_lines():
    long = long_functions()
    assert not long, "split these by what each part owns:\n" + "\n".join(long)


def test_the_cython_rule_measures_a_function_to_its_last_indented_line():
    body = "\n".join(f"    x += {i}" for i in range(61))
    text = f"cdef int f(int x,\n        int y) noexcept nogil:\n{body}\n\n    return x\n\ncdef class C:\n    pass\n"
    assert cython_functions(text) == [("f", 1, 65)]
