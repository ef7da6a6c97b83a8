# The two commands of the README contract: `make render` and `make test`. Each sets up .venv itself.
PY := .venv/bin/python
STACK ?= dev
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: setup setup-test render render-all test test-fast lint format typecheck docs bench fuzz

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

render-all: setup
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s >/dev/null && echo "rendered/$$s"; done

docs: setup
	$(PY) -m tools.gendocs

# ruff checks and formats (ruff.toml); `make format` rewrites what the check would refuse.
lint: setup-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup-test
	$(PY) -m ruff format .

# mypy.ini says what is checked and how strictly.
typecheck: setup-test
	$(PY) -m mypy

test: setup-test lint typecheck
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s --check || exit 1; done
	$(PY) -m tools.gendocs --check
	$(PY) -m pytest -q

bench: setup
	$(PY) -m tools.bench

# The quick loop: everything but the tests that run real torchrun processes for a minute or more.
test-fast: setup-test lint typecheck
	$(PY) -m pytest -q -m "not slow"

# 1000 random stack files (tests/test_fuzz_stacks.py): each refused with a key path or rendered clean.
fuzz: setup-test
	FASTPATH_FUZZ_EXAMPLES=$${FASTPATH_FUZZ_EXAMPLES:-1000} $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz_stacks.py
