# Hearth: every target installs what it needs first (scripts/setup.sh is idempotent and fast
# when nothing changed), so `make serve` and `make test` work on a fresh clone.
#   make setup   virtual environment, packages, Vulkan driver check, default model file
#   make serve   run the OpenAI-compatible server on the default models
#   make test    the whole pytest suite (heavy tests included, as in CI), with the ray extra its Ray Serve test needs
#   make bench   Hearth against its peers on this machine (installs them first): llama-cpp-python on the
#                shipped GGUF, sentence-transformers on the shipped embedding model, onnxruntime on Kokoro's
#                ONNX file, faster-whisper on Whisper tiny.en; the same warm-up and repetitions for every
#                engine, median (min-max) and ratios (bench/README.md)
# Extra arguments: SERVE_ARGS, PYTEST_ARGS, BENCH_ARGS, e.g. `make test PYTEST_ARGS="-m 'not heavy'"`.

PY := .venv/bin/python
SERVE_ARGS ?=
PYTEST_ARGS ?=
BENCH_ARGS ?=
EMBEDDINGS_BENCH_ARGS ?=
# Whisper vs faster-whisper (the bench extra installs it; --peer-python picks another interpreter), e.g.
# TRANSCRIPTION_BENCH_ARGS="--clips 5"
TRANSCRIPTION_BENCH_ARGS ?=
SPEECH_BENCH_ARGS ?=
# The machine's name in the result files: `make bench BENCH_MACHINE=cpu-2core` writes
# bench/results/cpu-2core-{text,embeddings,speech,transcription}.json (no files when empty).
BENCH_MACHINE ?=
bench_json = $(if $(BENCH_MACHINE),--json bench/results/$(BENCH_MACHINE)-$(1).json)

.PHONY: setup serve test bench

setup:
	bash scripts/setup.sh

serve: setup
	$(PY) -m server $(SERVE_ARGS)

# pytest exits 5 when it collected no tests: say so, and fail rather than pass silently. The slowest tests are
# listed at the end, where a CI log's tail shows them.
test: setup
	HEARTH_EXTRAS=test,models,ray bash scripts/setup.sh
	@rc=0; $(PY) -m pytest -q --durations=25 $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc = 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	exit $$rc

# llama-cpp-python builds from source (several minutes on 2 cores). For a GPU build of the peer,
# pass CMAKE_ARGS, e.g. CMAKE_ARGS="-DGGML_CUDA=on" (see bench/README.md).
bench: setup
	HEARTH_EXTRAS=test,models,bench bash scripts/setup.sh
	$(PY) bench/text.py $(call bench_json,text) $(BENCH_ARGS)
	$(PY) bench/embeddings.py $(call bench_json,embeddings) $(EMBEDDINGS_BENCH_ARGS)
	$(PY) bench/speech.py $(call bench_json,speech) $(SPEECH_BENCH_ARGS)
	$(PY) bench/transcription.py $(call bench_json,transcription) $(TRANSCRIPTION_BENCH_ARGS)
