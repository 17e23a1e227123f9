# poplimit: the two commands are `make demo` and `make test`.
GO ?= go
export POPLIMIT_REQUIRE_MEMCACHED = 1

.PHONY: test demo deps build vet lint cross fuzz fuzz-short bench clean

# deps installs the Debian packages the integration suite runs against
# (memcached, libmemcached-tools for memccapable, nutcracker, redis-server,
# prometheus for promtool, systemd for systemd-analyze, postgresql) when missing.
deps:
	@bash .ci/deps

# build: every package, then the commands into bin/ (GOBIN=bin go install;
# -buildvcs=auto so --version names the clone's commit even where the go
# environment turns VCS stamping off).
build:
	$(GO) build ./...
	GOBIN=$(CURDIR)/bin $(GO) install -buildvcs=auto ./cmd/...

# vet: go vet, and gofmt must have nothing to change.
vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# lint: staticcheck, pinned (the go command fetches it through the module
# proxy on first use; nothing is added to go.mod).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

# cross: the library and the daemons also build for macOS and Windows
# (proxy/fastconn's raw system calls and mcproxy's epoll parking are Unix or
# Linux only, with fallbacks; bench and popbench are
# Linux tools).
LIBS = ./counter/... ./pop/... ./proxy/... ./shard/... ./cmd/internal/... ./cmd/edge ./cmd/mcproxy
cross:
	GOOS=darwin $(GO) build $(LIBS)
	GOOS=windows $(GO) build $(LIBS)

# test: vet, staticcheck and cross builds, then every test with the race detector,
# including the integration suite against real memcached, memccapable and
# nutcracker and cmd/deploy's checks (systemd-analyze verify on the units,
# promtool check/test rules on the alerts, the dashboard's and alerts'
# metrics and METRICS.md against the binaries' live /metrics, a clean
# install printing its commit, a demo log without carriage returns), then
# every fuzz target for a few seconds (fuzz-short).
test: deps vet lint cross
	$(GO) test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory fuzz-short

# demo: a whole PoP with live traffic (real memcached when installed, the
# in-process shards otherwise); the report lands in out/.
demo:
	$(GO) run ./cmd/popbench demo

# fuzz runs every fuzz target of every package (.ci/fuzz finds them) for
# FUZZTIME each (default 60s), minimising new inputs for at most
# FUZZMINIMIZE runs; fuzz-short is the same for FUZZTIME_SHORT each
# (default 2s: 26 targets, about a minute), run by make test.
FUZZTIME ?= 60s
FUZZTIME_SHORT ?= 2s
FUZZMINIMIZE ?= 200x
fuzz:
	@GO=$(GO) bash .ci/fuzz $(FUZZTIME) $(FUZZMINIMIZE)

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf out bin
