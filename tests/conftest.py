"""Shared fixtures: temporary stores, a fast embedder, and a tiny random Llama built in-process."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# Gradio's file cache, one per test process (and the app processes it starts): a forget removes every organiser
# export in the cache (chatbot/exports.py), and a shared /tmp/gradio let another worker's forget remove the folder
# under an export being made (the organiser's export test, once under load)
os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix=f"keem-gradio-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")

from memory.engine import MemoryEngine
from memory.store import Store
from models.embedders import NgramEmbedder

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs mounted at `path` (root, as on CI; elsewhere the test skips), unmounted afterwards."""
    import subprocess

    path.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path) -> None:
    """Fill a mounted disk to the brim with DISK/filler (delete it to free the space)."""
    with (disk / "filler").open("wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 4096)


def dead_owner() -> str:
    """A job owner whose process has exited: what a crash leaves on the jobs it was running."""
    import socket
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}"


# -- Postgres ---------------------------------------------------------------------------------------------------------
# The store's contract runs on both engines (`store_url`). Postgres comes from the PG* environment that
# `pg_virtualenv` sets (`make test` wraps pytest in it). Each pytest-xdist worker gets a database of its own for the
# session, and each test a fresh schema in it (the URL sets search_path; CREATE SCHEMA takes milliseconds where
# CREATE DATABASE takes a third of a second), dropped after it. Without a server the Postgres half skips locally and
# FAILS on CI (CI=true), which must run both.


def _pg_url(database: str, schema: str = "") -> str:
    from urllib.parse import quote

    host, port = os.environ.get("PGHOST", "localhost"), os.environ.get("PGPORT", "5432")
    user, password = quote(os.environ.get("PGUSER", "postgres")), quote(os.environ.get("PGPASSWORD", ""), safe="")
    auth = f"{user}:{password}@" if password else f"{user}@"
    options = [f"options={quote(f'-csearch_path={schema}', safe='')}"] if schema else []
    if host.startswith("/"):  # a socket folder
        query = "&".join([f"host={quote(host)}", f"port={port}", *options])
        return f"postgresql://{auth}/{database}?{query}"
    return f"postgresql://{auth}{host}:{port}/{database}" + (f"?{options[0]}" if options else "")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[tuple[str, object]]:
    """This worker's database on the Postgres server of the PG* environment, with a connection to it (autocommit),
    or skip (fail on CI)."""
    import uuid

    why = ""
    try:
        import psycopg

        admin = psycopg.connect(_pg_url(os.environ.get("PGDATABASE", "postgres")), autocommit=True, connect_timeout=3)
    except ImportError:
        why = "psycopg is not installed (make install)"
    except Exception as exc:
        why = f"no Postgres server in the PG* environment ({' '.join(str(exc).split())[:90]}...); run: make test"
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the Postgres half of the store's contract: {why}")
        pytest.skip(why)
    name = f"keem_test_{os.environ.get('PYTEST_XDIST_WORKER', 'gw')}_{uuid.uuid4().hex[:10]}".lower()
    admin.execute(f"create database {name}")
    conn = psycopg.connect(_pg_url(name), autocommit=True)
    try:
        yield name, conn
    finally:
        conn.close()
        admin.execute(f"drop database if exists {name} with (force)")
        admin.close()


@pytest.fixture
def pg_url(pg_database: tuple[str, Any]) -> Iterator[str]:
    """A fresh, empty Postgres schema for this test (its URL sets search_path), dropped afterwards with every
    connection the test left open."""
    import uuid

    name, conn = pg_database
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn.execute(f"create schema {schema}")
    try:
        yield _pg_url(name, schema)
    finally:
        conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
            [name],
        )
        conn.execute(f"drop schema {schema} cascade")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store lives, once per engine: a SQLite file, then a fresh Postgres database."""
    if request.param == "sqlite":
        return str(tmp_path / "keem.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store several real processes of one test share (app processes, workers, the CLI): a fresh Postgres
    schema where the PG* environment has a server (`make test` always, and CI must), else a SQLite file: the
    deployment the multi-process tests stand for is the one past one machine."""
    if os.environ.get("PGHOST") or os.environ.get("CI", "").lower() == "true":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "keem.db")


@pytest.fixture
def any_store(store_url: str) -> Iterator[Store]:
    """A store on each engine in turn (the contract tests)."""
    s = Store(store_url)
    yield s
    s.close()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "keem.db")
    yield s
    s.close()


@pytest.fixture
def engine(store: Store) -> MemoryEngine:
    return MemoryEngine(store, NgramEmbedder())


def build_tiny_llama(folder: Path, corpus: list[str], vocab_size: int) -> str:
    """A 2-layer random Llama with a BPE tokenizer of `vocab_size` trained here on `corpus`, saved like a hub
    checkpoint in `folder`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer random Llama with a 400-token BPE tokenizer trained here; saved like a hub checkpoint."""
    corpus = [
        "사용자는 테니스를 치다가 손목을 다쳤다.",
        "안녕하세요 오늘 기분이 어때요?",
        "hello world, how are you?",
        "<|user|> <|assistant|> <|system|> 요약 기억 대화",
    ] * 20
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), corpus, 400)


def build_nli_classifier(folder: Path, labels: dict[int, str], always: int | None) -> str:
    """A tiny random BERT pair classifier (WordPiece vocabulary trained here) whose answer is always `always`
    (None: random weights, e.g. a one-label cross-encoder whose scores differ by pair)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["사용자는 서울에 산다", "사용자는 부산에 산다", "고양이 개 키운다"] * 5,
        trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=len(labels),
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        if always is None:  # logits of a visible size (initialised at std 0.02, pairs differ in the 4th decimal)
            model.classifier.weight.normal_(0.0, 1.0)
        else:  # whatever the input, the logits favour `always`
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.tensor([10.0 if i == always else 0.0 for i in range(len(labels))]))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


@pytest.hookimpl(trylast=True)  # after tests/e2e/conftest.py has marked its tests slow
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files holding slow tests first (each file keeps its order). Under `--dist loadfile` pytest-xdist hands
    out whole files in this order (`--no-loadscope-reorder` in pyproject.toml keeps it; by default it sorts files by
    their number of tests, which put the one-test browser and process files, the longest, last): the long files
    start early and the many short ones even out the workers at the end instead of one long file running alone."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _organiser_guesses_start_fresh() -> None:
    """The organiser password's limiter is one per process (chatbot/trials/web.py): each test starts as a new
    process would, so an unlock in one test never waits on a guess made by the test before it."""
    import sys

    web = sys.modules.get("chatbot.trials.web")
    if web is not None:
        web.ORGANISER_GUESSES.reset()


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)  # this process's Gradio cache, with its files
