# kernelscope: `make demo` runs the main job on bundled real data; `make test` runs the suite.
# Both work on a fresh machine with only python3: they create .venv when it is missing.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
TORCH_WHEEL_SPEC ?= torch==2.13.0
TRITON_SPEC      ?= triton==3.6.0
NVRTC_SPEC       ?= nvidia-cuda-nvrtc-cu12==12.9.86

.PHONY: demo test install clean bench

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[dev,ray]'  # ray: the trace-set Ray executor and its CI test
	# CPU torch (the wheel on disk where present) for the Triton-interpreter tests; optional.
	$(VPY) -m pip install -q '$(TORCH_WHEEL_SPEC)' || echo "torch not installed: torch-dependent tests will skip"
	# Triton for the CPU-interpreter checks of the MLA kernels (TRITON_INTERPRET=1); optional.
	$(VPY) -m pip install -q '$(TRITON_SPEC)' || echo "triton not installed: the kernel interpreter tests will skip"
	# NVRTC (no GPU needed) for the offline compile check of the CUDA kernel's source; optional.
	$(VPY) -m pip install -q '$(NVRTC_SPEC)' || echo "NVRTC not installed: the offline CUDA compile check will skip"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VPY) -m mcp_server.faces.demo
	@echo "kernelscope is installed in $(VENV): 'source $(VENV)/bin/activate' puts the kernelscope command on PATH (or run $(VENV)/bin/kernelscope)"

# headless Chromium for the HTML-report test (Debian; the test skips where it is absent)
browser-deps:
	command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium) || true

# lint (ruff), types (mypy), import layers (import-linter), the skills' frontmatter (Agent Skills
# reference validator), dead code (vulture, tools/deadcode.py), then the whole suite (GPU tests skip
# without a GPU)
test: $(STAMP) browser-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VPY) tools/validate_skills.py
	$(VPY) tools/deadcode.py
	$(VPY) -m pytest -q

bench: $(STAMP)
	$(VPY) bench/bench_trace.py
	$(VPY) bench/bench_timeline.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
