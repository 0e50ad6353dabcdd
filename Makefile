# The two commands of the README's quick start. Everything a fresh Debian machine needs is installed
# from here; nothing lives only in a developer's shell.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: run test install install-test system-deps bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(PY)
	$(PIP) install --quiet -e .

install-test: $(PY)
	$(PIP) install --quiet -e ".[test,spark]"

system-deps:
	bash scripts/install-system-deps.sh

# A local cluster (embedded metadata, 3 bookie processes) plus a short demo; serves until Ctrl-C.
run: install
	$(VENV)/bin/bkfast sandbox --bookies 3 --demo

test: install-test system-deps
	$(PY) -m pytest

bench: install-test
	$(PY) -m pytest bench/ --benchmark-only --benchmark-columns=min,median,ops,rounds --benchmark-sort=name

clean:
	rm -rf build $(VENV) *.egg-info bkfast/*.c bkfast/*.so bkfast/*/*.c bkfast/*/*.so
