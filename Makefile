# Developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SERVER_TREE := pytriton/tritonserver
TORCH_SPEC ?= torch==2.13.0

# Reinstall when the install inputs change, or when the fetched server tree is gone (unless the
# user brings their own server, see build_backend/pytriton_build.py).
INSTALL_INPUTS := pyproject.toml constraints.txt $(wildcard build_backend/*.py) $(wildcard pytriton/backend/*.c pytriton/backend/*.h)
ifeq ($(filter 1 true yes on,$(PYTRITON_SKIP_SERVER_FETCH)),)
INSTALL_INPUTS += $(SERVER_TREE)/VERSION
endif

.PHONY: install lock generate check-generated test demo lint clean docs

install: $(STAMP)

# Every version comes from the lock, constraints.txt (build_backend/lock.py), the build's
# setuptools included; on an interpreter the lock is not for, lock.py says so and pyproject's
# ranges apply. torch runs the page examples: the CPU build this machine kind keeps on disk.
$(STAMP): $(INSTALL_INPUTS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@if $(VPY) build_backend/lock.py applies; then \
	  set -x; \
	  $(VPY) -m pip install --constraint constraints.txt --upgrade pip && \
	  $(VPY) -m pip install --constraint constraints.txt --build-constraint constraints.txt \
	    -e '.[test]' '$(TORCH_SPEC)'; \
	else \
	  set -x; \
	  $(VPY) -m pip install --upgrade pip && $(VPY) -m pip install -e '.[test]' '$(TORCH_SPEC)'; \
	fi
	@touch $@

# Moves the lock to the newest releases pyproject.toml admits (in a scratch environment), then
# reinstalls .venv from it: run `make test` before committing the new constraints.txt.
lock:
	$(PYTHON) build_backend/lock.py write --torch '$(TORCH_SPEC)'
	$(MAKE) install

# No recipe: a missing server tree counts as changed, so the stamp above is remade and the
# editable install fetches the tree again.
$(SERVER_TREE)/VERSION:

# The blocking clients (pytriton/client/client.py, core.py, ...) are generated from the asyncio
# ones (build_backend/unasync.py, standard library only) and committed. After editing an asyncio
# source, `make generate` writes them; every other target only checks them, and fails, saying to
# run it, when one is stale: nothing rewrites a committed file behind your back.
# pytriton/backend/contract.h, the backend's view of the wire and the model parameters, is generated
# from pytriton/ipc/protocol.py (build_backend/contract.py) and committed the same way.
generate:
	$(PYTHON) build_backend/unasync.py
	$(PYTHON) build_backend/contract.py

check-generated:
	@$(PYTHON) build_backend/unasync.py --check
	@$(PYTHON) build_backend/contract.py --check

# pytest exits 5 when no test ran; make fails on it like on any non-zero status. The suite mostly
# waits on servers starting and stopping, so it runs in TEST_WORKERS processes (pytest-xdist), a
# file to a process: a file's tests share its module fixtures and run in order. The tests hold to
# that: ports are free ones, leftovers are judged by their owner's pid. TEST_WORKERS=0 runs
# it in this process alone, e.g. under a debugger.
TEST_WORKERS ?= 3
test: check-generated install
	$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

demo: check-generated install
	$(VPY) examples/demo.py

# The API reference, generated from the docstrings (tests/docs/test_api_reference.py builds it
# too and checks its links): open build/api/index.html.
API_MODULES := pytriton.triton pytriton.remote pytriton.facade.base pytriton.model_config pytriton.decorators \
	pytriton.client pytriton.exceptions pytriton.openai.binding
docs: check-generated install
	$(VPY) -m pdoc --docformat google -o build/api $(API_MODULES)
	@echo "API reference: build/api/index.html"

lint: check-generated install
	$(VPY) -m ruff check .
	$(VPY) -m mypy pytriton

# Keeps .venv and the wheel cache; drops the stamp so that the next install re-extracts the
# server tree (from the cache, no download).
clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache $(SERVER_TREE) $(STAMP)
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# The benchmark: pytriton against the plain Triton Python backend, with perf_analyzer
# (fetched into the cache by bench/run.py). Not part of `make test`; e.g.
# `make bench BENCH_ARGS="--cases small_c16 --protocols http"`. See bench/README.md.
# `make bench-gpu` (= `make bench BENCH_ARGS="--gpu"`) is the GPU path: a torch model on cuda;
# it refuses, starting nothing, where torch sees no GPU.
.PHONY: bench bench-gpu
bench: install
	@$(VPY) -c "import matplotlib" 2>/dev/null || $(VPY) -m pip install matplotlib
	$(VPY) bench/run.py $(BENCH_ARGS)

bench-gpu: install
	@$(VPY) -c "import matplotlib" 2>/dev/null || $(VPY) -m pip install matplotlib
	$(VPY) bench/run.py --gpu $(BENCH_ARGS)

# The reliability harness (harness/README.md); not part of `make test`, which runs each
# in a short form (tests/functional/harness). E.g. `make soak SOAK_ARGS="--requests 20000"`.
.PHONY: soak fuzz clients
soak: install
	@$(VPY) -c "import matplotlib" 2>/dev/null || $(VPY) -m pip install matplotlib
	$(VPY) harness/soak.py $(SOAK_ARGS)

fuzz: install
	$(VPY) harness/fuzz.py $(FUZZ_ARGS)

clients: install
	$(VPY) harness/clients.py $(CLIENTS_ARGS)

# pytriton's backend built with AddressSanitizer, under the functional tests that serve through it
# (harness/asan.py): fails on any ASan error and on leaks in our library. E.g.
# `make asan ASAN_ARGS="tests/functional/test_serving.py"`.
.PHONY: asan
asan: check-generated install
	$(VPY) harness/asan.py $(ASAN_ARGS)

# The fault matrix (harness/faults.py): 20 rounds of faults, then 20 as PID 1 (root only).
.PHONY: faults
faults: install
	$(VPY) harness/faults.py $(FAULTS_ARGS)
