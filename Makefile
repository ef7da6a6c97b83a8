# The two commands of the README contract: `make render` and `make test`. Each sets up .venv itself.
PY := .venv/bin/python
STACK ?= dev
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: setup setup-test render diff render-all test test-fast lint format typecheck docs bench fuzz upstream

# Two stamps: rendering needs only requirements.txt; tests add requirements-test.txt (PyTorch among them, for the
# restart test). Each reinstalls when a file it depends on changes (exact pins: unchanged ones are no-ops). Each
# install says in one line what it installs; -qq keeps pip to its errors.
PIP := $(PY) -m pip install -qq --disable-pip-version-check
setup: .venv/.render
setup-test: .venv/.test

.venv/.render: requirements.txt
	@test -x $(PY) || python3 -m venv .venv
	@echo "installing render dependencies into .venv: $$(grep -v '^#' requirements.txt | tr '\n' ' ')"
	@$(PIP) -r requirements.txt
	@touch $@

.venv/.test: .venv/.render requirements.txt requirements-test.txt
	@echo "installing test dependencies into .venv: $$(grep -v '^#' requirements-test.txt | tr '\n' ' ')"
	@$(PIP) -r requirements.txt -r requirements-test.txt
	@touch $@

render: setup
	$(PY) -m tools.render --stack $(STACK)

# What a stack edit does to the running cluster: the committed render (OLD) against the stack file (NEW).
diff: setup
	$(PY) -m tools.impact $(or $(OLD),rendered/$(STACK)) $(or $(NEW),stacks/Pulumi.$(STACK).yaml)

render-all: setup
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s >/dev/null && echo "rendered/$$s"; done

docs: setup
	$(PY) -m tools.gendocs

# The upstream files the tests and tools check against (upstream.lock.yaml: URL at the pinned tag, sha256), into
# .cache/upstream/: copied from ../shared/upstream when that mirror is beside the checkout, else downloaded. Without
# them `make test` still passes: each test that needs one is skipped, naming it.
upstream: setup
	$(PY) -m tools.upstream

# ruff checks and formats (ruff.toml); `make format` rewrites what the check would refuse. shellcheck reads every
# shell program in the tree (tracked, or new and not ignored): each is POSIX sh, since job images may have no bash.
# A fresh Debian machine gets shellcheck from apt, fetching the package index only if the install needs it.
lint: setup-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@command -v shellcheck >/dev/null || apt-get install -y -qq shellcheck || \
		{ apt-get update -qq && apt-get install -y -qq shellcheck; }
	shellcheck $$(git ls-files --cached --others --exclude-standard '*.sh')

format: setup-test
	$(PY) -m ruff format .

# mypy.ini says what is checked and how strictly.
typecheck: setup-test
	$(PY) -m mypy

# pytest runs one worker per core (pytest-xdist): the suite is CPU-bound Python, and each worker renders the
# committed stacks once for the tests it is given.
PYTEST := $(PY) -m pytest -q -rs -n auto --dist worksteal

test: setup-test lint typecheck
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s --check || exit 1; done
	$(PY) -m tools.gendocs --check
	$(PYTEST)

bench: setup
	$(PY) -m tools.bench

# The quick loop: everything but the tests that run real torchrun processes for a minute or more.
test-fast: setup-test lint typecheck
	$(PYTEST) -m "not slow"

# 1000 random stack files (tests/test_fuzz_stacks.py): each refused with a key path or rendered clean.
fuzz: setup-test
	FASTPATH_FUZZ_EXAMPLES=$${FASTPATH_FUZZ_EXAMPLES:-1000} $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz_stacks.py
