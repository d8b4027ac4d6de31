"""Imports point downward only (README "Layout"): chatbot -> evaluation -> memory -> models, nothing back up."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what each package may import from the project (itself included); benchmarks/ and tests/ are never imported
ALLOWED = {
    "models": {"models"},
    "memory": {"memory", "models"},
    "evaluation": {"evaluation", "memory", "models"},
    "chatbot": {"chatbot", "evaluation", "memory", "models"},
}
PROJECT = {*ALLOWED, "benchmarks", "tests", "app"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & PROJECT


def test_imports_point_downward_only():
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for package, allowed in ALLOWED.items()
        for path in sorted((ROOT / package).glob("**/*.py"))
        for name in sorted(_imports(path) - allowed)
    ]
    assert not wrong, wrong
