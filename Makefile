# Two commands set everything up: `make run` and `make test` (see README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
LOCK_HASH := $(shell cksum requirements.lock | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(LOCK_HASH)
ARGS ?=

.PHONY: run test lint format bench chaos install clean lock

install: $(STAMP)

$(STAMP): requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (set PYTHON=/path/to/python3.11)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	@rm -f $(VENV)/.installed-*
	@touch $@

run: $(STAMP)
	$(PY) -m devstack run

test: $(STAMP)
	$(PY) -m devstack test -- $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) -m devstack bench -- $(ARGS)

chaos: $(STAMP)
	$(PY) -m devstack chaos -- $(ARGS)

clean:
	rm -rf $(VENV) .data

lock: $(STAMP)
	$(VENV)/bin/pip-compile --quiet --extra dev --strip-extras --no-emit-index-url \
	  --no-emit-find-links -o requirements.lock pyproject.toml
