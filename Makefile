# poplimit: the two commands are `make demo` and `make test`.
GO ?= go
export POPLIMIT_REQUIRE_MEMCACHED = 1

.PHONY: test demo deps build vet cross fuzz bench clean

# deps installs the Debian packages the integration suite runs against
# (memcached, libmemcached-tools for memccapable, nutcracker) when missing.
deps:
	@bash .ci/deps

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

# cross: the library and the daemons also build for macOS and Windows
# (FastConn's raw system calls are Unix-only; bench and popbench are
# Linux tools).
LIBS = ./counter ./pop ./proxy ./shard ./cmd/edge ./cmd/mcproxy
cross:
	GOOS=darwin $(GO) build $(LIBS)
	GOOS=windows $(GO) build $(LIBS)

# test: vet and cross builds, then every test with the race detector,
# including the integration suite against real memcached, memccapable and
# nutcracker.
test: deps vet cross
	$(GO) test -race -count=1 -timeout 15m ./...

# demo: a whole PoP with live traffic (real memcached when installed, the
# in-process shards otherwise); the report lands in out/.
demo:
	$(GO) run ./cmd/popbench demo

# fuzz runs every fuzz target for FUZZTIME each (default 60s).
FUZZTIME ?= 60s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf out
