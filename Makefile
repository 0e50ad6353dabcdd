# The two commands of the README's quick start. Everything a fresh Debian machine needs is installed
# from here; nothing lives only in a developer's shell.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: run test test-fast typecheck install install-test system-deps bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Installed once, and again only when the build inputs change (the package is installed editable, so
# Python edits need no reinstall; the Cython extensions are rebuilt when a .pyx/.pxd/.pxi/.h changes).
BUILD_INPUTS := setup.py pyproject.toml $(wildcard bkfast/*.pyx bkfast/*.pxd bkfast/*.pxi bkfast/*.h \
	bkfast/*/*.pyx bkfast/*/*.pxd bkfast/*/*.pxi)

install: $(VENV)/.installed

$(VENV)/.installed: $(PY) $(BUILD_INPUTS)
	$(PIP) install --quiet -e .
	touch $@

install-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(PY) $(BUILD_INPUTS)
	$(PIP) install --quiet -e ".[test,spark]"
	touch $@ $(VENV)/.installed

system-deps:
	bash scripts/install-system-deps.sh

# A local cluster (embedded metadata, 3 bookie processes) plus a short demo; serves until Ctrl-C.
run: install
	$(VENV)/bin/bkfast sandbox --bookies 3 --demo

# The codec and in-process client/server tests once more on the pure-Python codec twin
# (BKFAST_PURE_CODEC=1 makes bkfast.codec bkfast._refcodec), so the oracle stays complete.
PURE_CODEC_TESTS := tests/codec/test_codec_facade.py tests/codec/test_codec_errors.py tests/codec/test_codec_properties.py tests/codec/test_codec_vectors.py \
	tests/codec/test_clientpath.py tests/client/test_client_throttle.py tests/bookie/test_add_batch.py tests/server/test_server_unit.py \
	tests/codec/test_v3_protocol_vectors.py tests/codec/test_v3_fastpath.py

# mypy over the package ([tool.mypy] in pyproject.toml), including that every implementation has all of
# its interface (bkfast/bookie/conformance.py: LedgerStorage, ServerBookie).
typecheck: install-test
	$(PY) -m mypy

# Two workers (pytest-xdist), each taking whole test files: a file's module-scoped cluster starts once, and
# most tests spend their time waiting on bookie processes, so two share the 2 cores of CI well.
test: install-test system-deps typecheck
	$(PY) -m pytest -n 2 --dist loadfile
	BKFAST_PURE_CODEC=1 $(PY) -m pytest -q $(PURE_CODEC_TESTS)

# The inner loop: everything but the crash tests, the fault campaigns, the Spark tests and the tests
# tests/slow_tests.txt names (each took 0.8 s or more); under 3 minutes on 2 cores. `make test` and CI run everything.
test-fast: install-test system-deps
	$(PY) -m pytest -q -m "not slow"

bench: install-test
	$(PY) -m pytest bench/ --benchmark-only --benchmark-columns=min,median,ops,rounds --benchmark-sort=name

clean:
	rm -rf build $(VENV) *.egg-info bkfast/*.c bkfast/*.so bkfast/*/*.c bkfast/*/*.so
