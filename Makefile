# NetSense testbed. `make experiment` and `make test` set themselves up.
SHELL := /bin/bash
PY_BOOT  ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# TORCH_SPEC: any pip requirement or wheel path. TORCH_INDEX_URL: where pip looks for it
# (empty: pip's configured index; plain PyPI serves CUDA builds on Linux, so for a CPU-only
# machine elsewhere give https://download.pytorch.org/whl/cpu).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
SCENARIO ?= smoke
SWEEP    ?= paper-quick
RESULTS  ?= results
PYTEST_ARGS ?=
# The suite's two tiers (DESIGN.md, "The tests' layout"): tests marked neither emulation
# nor serial share nothing and run on XDIST workers at once (one module per worker: its
# module fixtures are made once); then the emulation and serial ones, one at a time.
# `make test` leaves out the tests marked slow; `make test-all` (and .ci/run) runs every test.
XDIST    ?= 2
PARALLEL := not emulation and not serial
SERIAL   := emulation or serial
# EXTRAS=dev,ray also installs Ray (`netsense sweep --executor ray` and its tests)
EXTRAS   ?= dev
APT_PACKAGES := mininet iperf3 bridge-utils tcpdump python3-simgrid openssh-server
# Only for the test that renders report.html in a real headless browser (skipped without it).
APT_TEST_PACKAGES := chromium
STAMP    := $(VENV)/.netsense-setup

.PHONY: setup test test-all test-slow experiment sweep figures report clean distclean lint bench doctor schemas \
        container-smoke container-clean

setup: $(STAMP)

# Idempotent: apt packages only when a tool is missing (said, with the command, before it
# runs); torch first (TORCH_SPEC, TORCH_INDEX_URL) so that pip never picks a CUDA build by
# itself; then the project itself, editable, with its dev extras.
$(STAMP): pyproject.toml
	@pkgs=""; \
	for t in mnexec iperf3 brctl tc tcpdump /usr/sbin/sshd; do command -v $$t >/dev/null 2>&1 || pkgs="$(APT_PACKAGES)"; done; \
	command -v chromium >/dev/null 2>&1 || pkgs="$$pkgs $(APT_TEST_PACKAGES)"; \
	if [ -n "$$pkgs" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  echo "setup: installing apt packages:$$pkgs (emulation tools; chromium only for the report test)"; \
	  echo "setup: $$SUDO apt-get install -y$$pkgs"; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$pkgs; \
	else echo "setup: apt packages present ($(APT_PACKAGES) $(APT_TEST_PACKAGES))"; fi
	@test -x $(PY) || $(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q $(if $(TORCH_INDEX_URL),--index-url "$(TORCH_INDEX_URL)") "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@# SimGrid: Debian's prebuilt bindings, linked into the venv (only that one module)
	@$(PY) -c "import simgrid" 2>/dev/null || for so in /usr/lib/python3/dist-packages/simgrid.cpython-*.so; do \
	  test -e "$$so" && ln -sf "$$so" "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/"; done; true
	@touch $(STAMP)

# Refresh the committed JSON schemas after a change to the scenario or sweep models.
schemas: setup
	$(VENV)/bin/netsense schema scenario --write
	$(VENV)/bin/netsense schema sweep --write

# Exit status 5 (no test selected, e.g. PYTEST_ARGS naming a file of the other tier) is no failure.
test: setup
	$(PY) -m pytest -q -ra -n $(XDIST) --dist loadfile -m "($(PARALLEL)) and not slow" $(PYTEST_ARGS) || [ $$? = 5 ]
	$(PY) -m pytest -q -ra -m "($(SERIAL)) and not slow" $(PYTEST_ARGS) || [ $$? = 5 ]

test-all: setup
	$(PY) -m pytest -q -ra -n $(XDIST) --dist loadfile -m "$(PARALLEL)" $(PYTEST_ARGS) || [ $$? = 5 ]
	$(PY) -m pytest -q -ra -m "$(SERIAL)" $(PYTEST_ARGS) || [ $$? = 5 ]

# What `make test` leaves out (the slow ones): `make test` then `make test-slow` is `make test-all`.
test-slow: setup
	$(PY) -m pytest -q -ra -n $(XDIST) --dist loadfile -m "($(PARALLEL)) and slow" $(PYTEST_ARGS) || [ $$? = 5 ]
	$(PY) -m pytest -q -ra -m "($(SERIAL)) and slow" $(PYTEST_ARGS) || [ $$? = 5 ]

lint: setup
	$(VENV)/bin/ruff check .

experiment: setup
	$(VENV)/bin/netsense run $(SCENARIO)

sweep: setup
	$(VENV)/bin/netsense sweep $(SWEEP)

figures: setup
	$(VENV)/bin/netsense plot -r $(RESULTS)

report: setup
	$(VENV)/bin/netsense report -r $(RESULTS)

# Speed figures (printed, not asserted): compressors (exits 1 when its target is missed),
# per-model step times, network build/teardown, the 8-worker / 4+4 scale runs, and the
# per-run overhead by phase.
bench: setup
	-$(PY) benchmarks/compressors.py
	$(PY) benchmarks/compute_step.py
	$(PY) benchmarks/emulation.py
	$(PY) benchmarks/run_scale.py
	$(PY) benchmarks/run_overhead.py

doctor: setup
	$(VENV)/bin/netsense doctor

# The smoke scenario in an unprivileged podman container (no --privileged, no --cap-add):
# builds the image (its base from Debian packages where no registry is reachable), runs it,
# copies the run folders to results/container/.  Installs podman when missing; see
# container/smoke.sh for its settings.  container-clean removes exactly these two images.
CONTAINER_IMAGE ?= localhost/netsense:dev
CONTAINER_BASE  ?= localhost/netsense-base:bookworm
container-smoke:
	CONTAINER_IMAGE=$(CONTAINER_IMAGE) CONTAINER_BASE=$(CONTAINER_BASE) SCENARIO=$(SCENARIO) \
	  PIP_PY=$(PY_BOOT) container/smoke.sh

container-clean:
	podman --runtime runc rmi --ignore $(CONTAINER_IMAGE) $(CONTAINER_BASE)

# Removes build caches and leftovers of this testbed's own runs (found by its prefix);
# never touches results/ or anything another tool created.
clean:
	rm -rf .pytest_cache .ruff_cache build dist *.egg-info
	find netsenseml workloads topologies testbed tests benchmarks -name __pycache__ -type d -prune -exec rm -rf {} +
	@if [ -x $(VENV)/bin/netsense ]; then $(VENV)/bin/netsense clean; fi

distclean: clean
	rm -rf $(VENV)
