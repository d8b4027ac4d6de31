"""The layout's rules (docs/contributing.md "Layout"): imports point downward only, chatbot -> training ->
evaluation -> memory -> models, nothing back up; inside chatbot, the core (bot, settings, session, study, worker) and
deploy/ know nothing of the front ends (web/, cli/, trials/); no import cycles, counting every import; every module
imports on its own."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what each package may import from the project (itself included); benchmarks/ and tests/ are never imported
ALLOWED = {
    "models": {"models"},
    "memory": {"memory", "models"},
    "evaluation": {"evaluation", "memory", "models"},
    "training": {"training", "evaluation", "memory", "models"},
    "chatbot": {"chatbot", "training", "evaluation", "memory", "models"},
}
PROJECT = {*ALLOWED, "benchmarks", "tests", "app"}
FRONT_ENDS = ("chatbot.web", "chatbot.cli", "chatbot.trials", "chatbot.api")


def _modules(path: Path) -> set[str]:
    """Every project module `path` imports, by dotted name, wherever the import is (relative imports are not used
    here)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PROJECT}


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _all_modules() -> list[Path]:
    return sorted(path for package in ALLOWED for path in (ROOT / package).glob("**/*.py"))


def test_imports_point_downward_only():
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _all_modules()
        for name in sorted(_modules(path))
        if name.split(".")[0] not in ALLOWED[path.relative_to(ROOT).parts[0]]
    ]
    assert not wrong, wrong


def test_chatbot_core_knows_no_front_end():
    core = [p for p in (ROOT / "chatbot").glob("**/*.py") if not _name(p).startswith(FRONT_ENDS)]
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in core
        for name in sorted(_modules(path))
        if name.startswith(FRONT_ENDS)
    ]
    assert not wrong, wrong


def test_no_import_cycles():
    """No import cycle between modules, counting every import: at module level, inside a function (a lazy import
    still closes a cycle, it only hides it) and under `if TYPE_CHECKING:` (types that need each other's module)."""
    names = {_name(p): p for p in _all_modules()}
    graph = {name: {t for t in _modules(path) if t in names and t != name} for name, path in names.items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node)


def test_the_page_and_the_trial_pages_do_not_import_each_other():
    """chatbot/trials/web.py builds on the page (chatbot/web/); the page uses a trial's rules, which live below both
    (chatbot/study.py), never chatbot/trials/."""
    web = (ROOT / "chatbot" / "web").glob("**/*.py")
    wrong = [
        f"{p.relative_to(ROOT)} imports {n}" for p in web for n in sorted(_modules(p)) if n.startswith("chatbot.trials")
    ]
    assert not wrong, wrong


def test_every_module_imports_on_its_own():
    """`python -c "import X"` for every module, in one fresh interpreter per package (a module that only imports
    after a sibling was imported first fails here)."""
    code = (
        "import importlib, sys\n"
        "for n in sys.argv[1:]:\n"
        "    importlib.import_module(n)\n"
        f"    [sys.modules.pop(m) for m in list(sys.modules) if m.split('.')[0] in {set(ALLOWED)!r}]\n"
    )
    running = [  # the packages side by side (each interpreter is independent)
        subprocess.Popen(
            [sys.executable, "-c", code, *(_name(p) for p in sorted((ROOT / package).glob("**/*.py")))],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for package in ALLOWED
    ]
    for proc in running:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    assert importlib.import_module("app")


def test_no_function_is_longer_than_100_lines():
    """Outside tests/ and benchmarks/, a function that long does a library's (or a template's) work, or two jobs."""
    long = []
    for path in [*_all_modules(), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or start) - start + 1 > 100:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "sort"}


def _changed(node: ast.AST) -> list[ast.expr]:
    """What a statement or call changes: the targets of an assignment or `del`, the object a list's or dict's
    mutating method is called on; each target of a tuple unpacking."""
    if isinstance(node, ast.Assign | ast.Delete):
        targets = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        targets = [node.func.value]
    else:
        return []
    flat: list[ast.expr] = []
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Tuple | ast.List):
            targets += target.elts
        else:
            while isinstance(target, ast.Subscript | ast.Starred):  # state.seen[0] = ...: the field changes
                target = target.value
            flat.append(target)
    return flat


def test_only_the_tab_state_changes_its_fields():
    """A tab's UserState (chatbot/web/state.py) changes through its own methods only: whether a message is answered
    hangs on flags (`awaiting`, `answering`, `retrying`) read and set together under its lock there, and the
    update the page follows (`job_id`) is set by name, not by whoever holds the state. No other module of chatbot/
    assigns one of its fields, or changes a list or dict of it in place (`self.x` in other classes is theirs)."""
    from dataclasses import fields

    from chatbot.web.state import UserState

    owned = {f.name for f in fields(UserState)} - {"user_id", "name", "lock"}  # who the tab is for never changes
    found = []
    for path in _all_modules():
        if path == ROOT / "chatbot" / "web" / "state.py" or ROOT / "chatbot" not in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _changed(node):
                if isinstance(target, ast.Attribute) and target.attr in owned:
                    if not (isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(target)}")
    assert not found, f"give UserState a method for these changes (chatbot/web/state.py): {found}"
