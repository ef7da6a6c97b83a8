# The two commands of the README contract: `make render` and `make test`. Each sets up .venv itself.
PY := .venv/bin/python
STACK ?= dev
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: setup render render-all test lint docs bench

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
