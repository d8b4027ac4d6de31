"""The Hugging Face Space configuration: README front matter and requirements.txt stay true to the project."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from models.spec import KOREAN_LLAMA

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
ZEROGPU_TORCH = {"2.1.0", "2.1.1", "2.1.2", "2.2.0", "2.2.2", "2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0"}  # its docs


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), "the Space reads its settings from YAML front matter at the top of README.md"
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_front_matter_names_a_gradio_app_the_project_can_run():
    meta = front_matter()
    assert meta["sdk"] == "gradio" and (ROOT / meta["app_file"]).is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    gradio = next(Requirement(r) for r in pyproject["project"]["dependencies"] if r.startswith("gradio"))
    assert str(meta["sdk_version"]) in gradio.specifier  # the Space installs exactly this version
    python = SpecifierSet(pyproject["project"]["requires-python"])
    assert str(meta["python_version"]) + ".0" in python
    assert KOREAN_LLAMA.removeprefix("hf:") in meta["models"]  # the model `auto` loads on a GPU
    assert meta["hf_oauth"] is True  # the 'Hugging Face로 로그인' button (chatbot/web/identity.py)


def test_requirements_mirror_the_project_dependencies():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {str(Requirement(r)) for r in [*pyproject["dependencies"], *pyproject["optional-dependencies"]["gpu"]]}
    # but not faiss-gpu: a Space searches one user's memory at a time, on the CPU (memory/vector_index.py), and
    # without `make install`'s reinstall, faiss-cpu's files could land over faiss-gpu's in the one `faiss` module
    wanted = {w for w in wanted if Requirement(w).name != "faiss-gpu"}
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    listed = {Requirement(line) for line in lines if line.strip() and not line.startswith("#")}
    torch = next(r for r in listed if r.name == "torch")
    assert {str(r) for r in listed - {torch}} == {w for w in wanted if not w.startswith("torch")}
    # the Space pins one torch that ZeroGPU supports and the project accepts
    [pin] = list(torch.specifier)
    assert pin.operator == "==" and pin.version in ZEROGPU_TORCH
    assert pin.version in next(Requirement(w) for w in wanted if w.startswith("torch")).specifier
