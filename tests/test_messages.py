"""Every error the page can show has its Korean message in one table (chatbot/web/messages.py)."""

from __future__ import annotations

import ast
import inspect
import re
from datetime import timedelta
from pathlib import Path

import pytest

import models.errors as errors
from chatbot.session import check_user_name, clean_message
from chatbot.study import Question, Study
from chatbot.web.messages import LOADING, MESSAGES, UNEXPECTED, korean_error
from models.errors import CODES, ContextOverflowError, InputError, KeemError, ModelUnavailableError, UpdateError

ROOT = Path(__file__).resolve().parent.parent
KINDS = {cls.kind for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, KeemError)}
HANGUL = re.compile("[\uac00-\ud7a3]")
ERROR_CLASSES = {name for name, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, KeemError)}


def raise_sites() -> list[tuple[str, str, set[str]]]:
    """(where, code, the params given) for every `code="..."` keyword in the project's code."""
    sites = []
    for path in [
        ROOT / "app.py",
        *(p for d in ("chatbot", "memory", "models", "evaluation", "training") for p in (ROOT / d).rglob("*.py")),
    ]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            words = {k.arg: k.value for k in node.keywords if k.arg}
            code = words.pop("code", None)
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                sites.append((f"{path.relative_to(ROOT)}:{node.lineno}", code.value, set(words)))
    return sites


def test_every_code_and_kind_has_a_korean_message_and_the_table_nothing_else():
    assert set(CODES) | KINDS == set(MESSAGES)
    assert len(KINDS) == len([c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, KeemError)])


def test_every_code_raised_is_defined_and_its_message_takes_the_params_given():
    sites = raise_sites()
    assert len(sites) >= len(CODES)  # the scan sees the project's raise sites
    for where, code, params in sites:
        assert code in CODES, f"{where}: code {code!r} is not in models/errors.py CODES"
        MESSAGES[code].format(message="x", **dict.fromkeys(params, 1))  # KeyError: a param it needs is not given


def test_every_refusal_the_page_raises_has_a_code() -> None:
    """The page's own refusals (chatbot/web, the trial page) are said from the table, never as "오류: <text>": each
    error they raise names its code, and no Korean sentence is built into one."""
    pages = [*(ROOT / "chatbot" / "web").rglob("*.py"), ROOT / "chatbot" / "trials" / "web.py"]
    bare = []
    for path in pages:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ERROR_CLASSES:
                said = " ".join(
                    str(part.value) for part in ast.walk(node) if isinstance(part, ast.Constant) and part.value
                )
                if not any(k.arg == "code" for k in node.keywords) or HANGUL.search(said):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, f"refusals without a code, or with a Korean sentence built in: {bare}"


def test_korean_messages_of_real_errors():
    with pytest.raises(InputError) as empty:
        clean_message(" \x00 ", 100)
    assert korean_error(empty.value).startswith("빈 메시지")
    with pytest.raises(InputError) as name:
        check_user_name("<b>")
    assert korean_error(name.value).startswith("이름은")
    question = Question("q1", "오늘 대화는 자연스러웠나요?")
    study = Study("s", "trial", ("keem",), 2, timedelta(hours=1), "동의", questions=(question,))
    with pytest.raises(InputError) as missing:
        study.check_answers({})
    assert korean_error(missing.value) == "'오늘 대화는 자연스러웠나요?' 문항에 답해 주세요."
    with pytest.raises(InputError) as unknown:
        study.check_answers({"q1": 3, "q9": 1, "q8": 2})
    assert korean_error(unknown.value) == "이 설문에 없는 문항입니다: q8, q9"


def test_a_context_overflow_is_not_bad_input_and_says_so_in_korean():
    exc = ContextOverflowError("the prompt needs 9000 tokens but model 'x' has room for 8000; shorten the message")
    assert not isinstance(exc, InputError) and exc.kind != InputError.kind
    assert korean_error(exc) == MESSAGES["context_overflow"] and "길이를 넘었습니다" in korean_error(exc)


def test_the_loading_state_is_known_by_its_code_not_its_text():
    assert korean_error(ModelUnavailableError("still loading", code="models_loading")) == LOADING
    assert korean_error(ModelUnavailableError(LOADING)) == f"오류: {LOADING}"  # same text, no code: not the state
    assert korean_error(UpdateError("refusing an empty memory")) == "기억을 바꿀 수 없습니다: refusing an empty memory"
    assert korean_error(RuntimeError("boom")) == UNEXPECTED


def test_an_error_keeps_its_korean_message_across_a_process_boundary():
    """ZeroGPU's `spaces` and process pools pickle exceptions: the code, params and class must survive, or the
    page would show the generic message instead of the error's own Korean text."""
    import pickle

    from models.errors import StorageError, UserForgottenError

    for error in (
        StorageError("the disk holding x is full; free some space", code="storage_full", path="x.db"),
        UserForgottenError("gone; log in again"),
        InputError("too long", code="message_too_long", length=5000, limit=4000),
    ):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert (back.code, back.params) == (error.code, error.params)
        assert korean_error(back) == korean_error(error) != korean_error(KeemError("x"))
