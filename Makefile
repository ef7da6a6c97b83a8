# The two commands of the README contract: `make render` and `make test`. Each sets up .venv itself.
PY := .venv/bin/python
STACK ?= dev
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: setup render render-all test test-fast lint docs bench fuzz

# Idempotent: rebuilds .venv only when requirements.txt changes.
setup: .venv/.installed

.venv/.installed: requirements.txt
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

render: setup
	$(PY) -m tools.render --stack $(STACK)

render-all: setup
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s >/dev/null && echo "rendered/$$s"; done

docs: setup
	$(PY) -m tools.gendocs

lint: setup
	$(PY) -m ruff check .

test: setup lint
	@for s in $(STACKS); do $(PY) -m tools.render --stack $$s --check || exit 1; done
	$(PY) -m tools.gendocs --check
	$(PY) -m pytest -q

bench: setup
	$(PY) -m tools.bench

# The quick loop: everything but the tests that run real torchrun processes for a minute or more.
test-fast: setup lint
	$(PY) -m pytest -q -m "not slow"

# 1000 random stack files (tests/test_fuzz_stacks.py): each refused with a key path or rendered clean.
fuzz: setup
	FASTPATH_FUZZ_EXAMPLES=$${FASTPATH_FUZZ_EXAMPLES:-1000} $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz_stacks.py
