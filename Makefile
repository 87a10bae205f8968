# rtsandbox build and test entry points. `make test` is the one command CI
# runs (through .ci/run); it needs a Docker daemon for the integration tests.
GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 20000x
BIN       := bin

.PHONY: all build test lint unit fuzz bench bench-compare demo clean

all: build

## build: the static worker, then the static host binary (CGO off) with the
## worker embedded.
build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o workerimage/rtsandbox-worker ./cmd/rtsandbox-worker
	cp workerimage/rtsandbox-worker $(BIN)/rtsandbox-worker
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -tags embedworker -o $(BIN)/rtsandbox ./cmd/rtsandbox

## test: every test with the race detector, the SDK wire tests, then
## formatting, vet and staticcheck, with each fuzz target run briefly
## beside them at the lowest CPU priority (scripts/test.sh). Every phase
## runs and reports even after one failed; package results print as they
## finish; a summary ends the run and the exit status fails when any
## phase did.
test:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/test.sh

lint:
	@out=$$(gofmt -l . | grep -v '^vendor/' || true); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

## unit: every test with the race detector; then the tests that drive our
## wire with the official Anthropic and OpenAI Go SDKs (build tag sdk), once
## and without the race detector: the SDKs are test-only and large, and
## race-instrumenting and vetting them tripled the test command's time on
## an empty build cache.
unit:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	$(GO) test -count=1 -tags sdk -timeout 10m ./modelapi ./broker ./internal/fakemodel

fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz-smoke.sh

## bench: the benchmarks recorded in docs/benchmarks.md (needs Docker).
bench:
	$(GO) test -run '^$$' -bench 'ModelCall|Pipeline' -benchtime 3s -count 3 ./broker/
	$(GO) test -run '^$$' -bench 'StreamedAnswer|StreamedRelayFloor' -benchtime 100x -count 3 ./broker/
	$(GO) test -run '^$$' -bench 'CheckJSON|ScanOnly|StreamScannerCorpus' ./upstream/
	$(GO) test -run '^$$' -bench ExtractPathological -benchtime 10x -count 3 ./webpage/
	RTSANDBOX_BENCH_MB=16 $(GO) test -run '^$$' -bench 'DecodeShapes|DecodePeak' -benchtime 1x ./broker/
	$(GO) test -run '^$$' -bench 'NormalizeConversation|NormalizeMessagesImage|NormalizeChatImage' ./modelapi/
	$(GO) test -run '^$$' -bench 'SealedTurn|DockerRunRm|BareContainer' -benchtime 30x ./sealed/
	$(GO) test -run '^$$' -bench LedgerTurn -benchtime 2s -count 3 ./budget/
	CI=true $(GO) test -run '^$$' -bench ServeSessionWorkerKill -benchtime 20x -count 3 ./cmd/rtsandbox/

## bench-compare: the model-call and scan benchmarks (every answer corpus) of
## BEFORE and HEAD, built first and run in alternation in one run.
BEFORE ?= f342ab3
bench-compare:
	scripts/bench-before-after.sh $(BEFORE)

demo: build
	$(BIN)/rtsandbox demo

clean:
	rm -rf $(BIN) workerimage/rtsandbox-worker
