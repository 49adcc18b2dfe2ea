# ParaLab — the two commands of the README: `make run` and `make test`.
# Thin wrapper: the build itself is CMake (CMakeLists.txt).

BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
DEFAULT_EXPERIMENT := resources/examples/first-look.paralab.json

# Debian packages the project needs (benchmarks use python3-torch as the reference; fortunes
# is the text data set's default corpus, /usr/share/games/fortunes; dpkg-dev, desktop-file-utils
# and appstream make and check the .deb).
PACKAGES := cmake g++ make pkg-config \
	qt6-base-dev qt6-base-dev-tools libqcustomplot-dev libsqlite3-dev libopenblas-dev libdnnl-dev \
	nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev openmpi-bin libopenmpi-dev \
	dataset-fashion-mnist fortunes xvfb xauth ccache python3-torch \
	dpkg-dev desktop-file-utils appstream

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build run test test-asan fuzz package clean

all: build

# Installs only what is missing; `apt-get update` first, because a fresh machine has no lists.
deps:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "All packages present."; fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# The window on the default experiment; with no display, the same experiment headless.
run: deps build
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ] && [ -e $(BUILD)/ui ]; then \
	  ./$(BUILD)/app/paralab; \
	else \
	  echo "No display: running $(DEFAULT_EXPERIMENT) headless."; \
	  ./$(BUILD)/app/paralab run $(DEFAULT_EXPERIMENT); \
	fi

test: deps build
	cd $(BUILD) && QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 300 -j$(JOBS)

# The engine, kernels and command line under AddressSanitizer and UndefinedBehaviorSanitizer
# (no window, no CUDA; the MPI jobs left out: Open MPI's own allocations are not ours to judge).
ASAN_BUILD ?= build-asan
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARALAB_GUI=OFF -DPARALAB_CUDA=OFF \
	  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure --timeout 600 -j$(JOBS) -E 'mpi|Mpi'

# The threaded parts under ThreadSanitizer: the communicators, every strategy, the run store and
# the data loader (no window, no CUDA, no MPI). The CPU kernels are built without their
# AVX-512/AVX2 clones, whose ifunc resolvers crash a TSan program before main
# (PARALAB_SIMD_CLONES=OFF). oneDNN runs without its primitive cache (capacity 0): TSan cannot
# see the synchronization inside that uninstrumented library, and the cache, shared by the rank
# threads, showed as races inside it; each primitive is then the creating thread's own. Only
# those test programs are built; ctest runs the suites (TSAN_TESTS) of tests/engine/test_comm.cpp,
# test_data.cpp's Loader and Shard, test_store*.cpp, test_event_stream.cpp, test_strategy_*.cpp.
# tests/tsan.supp suppresses hogwild's deliberate races and nothing else.
TSAN_BUILD ?= build-tsan
TSAN_TARGETS := engine_comm_test engine_data_test engine_store_test engine_store_queries_test \
	engine_store_stress_test engine_event_stream_test engine_strategy_async_test \
	engine_strategy_dp_test engine_strategy_tp_test engine_strategy_hybrid_test \
	engine_strategy_zero3_test engine_strategy_pipeline_test
TSAN_TESTS := ^(LocalComm|(Worlds|Pieces|LastPiece)/RingTest|Worlds/RootedTest|Loader|Shard|RunStore|RunStoreQueries|RunStoreStress|EventStream|AsyncStrategies|Hogwild|ParamServer|Workers/SyncServerEqualsSingle|DataParallel(Memory|Options|Runs)|DataParallel/MatchesSingle|TensorParallel|Hybrid|ZeroStage3|Stages|Stages/MatchesSingle)\.
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARALAB_GUI=OFF -DPARALAB_CUDA=OFF \
	  -DPARALAB_MPI=OFF -DPARALAB_DNNL=ON -DPARALAB_SIMD_CLONES=OFF \
	  "-DCMAKE_CXX_FLAGS=-fsanitize=thread" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread"
	cmake --build $(TSAN_BUILD) -j$(JOBS) --target $(TSAN_TARGETS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1" \
	  ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 DNNL_PRIMITIVE_CACHE_CAPACITY=0 \
	  ctest --output-on-failure --timeout 600 -j$(JOBS) -R '$(TSAN_TESTS)'

# The fuzz targets of every reader (tests/fuzz) under libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer, in their own clang build; only they and what they link are built.
# Each runs FUZZ_SECONDS, one after the other, from its seed corpus (tests/fuzz/corpus/NAME) and
# with its dictionary (tests/fuzz/NAME.dict) where it has one;
# what it learns goes to FUZZ_BUILD/fuzz-corpus/NAME, a finding to FUZZ_BUILD/fuzz-findings/NAME/
# (keep it in tests/fuzz/corpus/NAME/ once fixed: `make test` replays those).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := experiment idx csv text safetensors cluster lesson store_import
FUZZ_PACKAGES := clang libclang-rt-dev libomp-dev
fuzz:
	@$(MAKE) --no-print-directory deps PACKAGES="$(PACKAGES) $(FUZZ_PACKAGES)"
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
	  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
	  -DPARALAB_FUZZ=ON -DPARALAB_GUI=OFF -DPARALAB_CUDA=OFF -DPARALAB_MPI=OFF -DPARALAB_DNNL=OFF
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_targets
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/fuzz-corpus/$$t $(FUZZ_BUILD)/fuzz-findings/$$t; \
	  dict=""; [ -f tests/fuzz/$$t.dict ] && dict="-dict=tests/fuzz/$$t.dict"; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  ./$(FUZZ_BUILD)/tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/fuzz-findings/$$t/ $$dict \
	    $(FUZZ_BUILD)/fuzz-corpus/$$t tests/fuzz/corpus/$$t > $(FUZZ_BUILD)/fuzz-$$t.log 2>&1 \
	    || failed="$$failed $$t"; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_BUILD)/fuzz-$$t.log); \
	  echo "fuzz_$$t: $${runs:-?} executions; log $(FUZZ_BUILD)/fuzz-$$t.log"; \
	done; \
	if [ -n "$$failed" ]; then echo "findings in:$$failed (see $(FUZZ_BUILD)/fuzz-findings/)"; exit 1; fi

# The Debian package of the program (cmake/Packaging.cmake): $(BUILD)/paralab_VERSION_ARCH.deb.
# It starts without the CUDA toolkit; `ctest -L package` in $(BUILD) proves it.
package: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target paralab
	cd $(BUILD) && cpack -G DEB

clean:
	rm -rf $(BUILD)
