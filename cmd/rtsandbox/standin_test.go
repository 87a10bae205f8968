package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

func TestStandinUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"no-listen", nil, nil, exitUsage, "--listen is required"},
		{"all-interfaces", []string{"--listen", "0.0.0.0:18788"}, nil, exitUsage, "loopback only"},
		{"empty-host", []string{"--listen", ":18788"}, nil, exitUsage, "not a loopback host:port"},
		{"public-ip", []string{"--listen", "192.0.2.1:18788"}, nil, exitUsage, "not a loopback host:port"},
		{"name", []string{"--listen", "example.com:18788"}, nil, exitUsage, "not a loopback host:port"},
		{"key-env-unset", []string{"--listen", "127.0.0.1:0", "--key-env", "RTS_STANDIN_KEY"}, nil, exitUsage, "RTS_STANDIN_KEY: the variable is not set"},
		{"help", []string{"-h"}, nil, exitOK, "SCRIPTED STAND-IN model, not a real LLM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut syncbuf.Buffer
			code := run(context.Background(), append([]string{"standin-model"}, tt.args...), mapEnv(tt.env), strings.NewReader(""), &out, &errOut)
			got := errOut.String()
			if tt.code == exitOK {
				got = out.String() // help goes to stdout
			}
			if code != tt.code || !strings.Contains(got, tt.want) {
				t.Errorf("standin-model %q = %d %q; want %d and %q", tt.args, code, got, tt.code, tt.want)
			}
		})
	}
}

func TestStandinHelpStatesLimits(t *testing.T) {
	for _, want := range []string{"test double", "loopback", "Anthropic Messages wire is not served", "--key-env", "SIGTERM",
		"host_memory_set", "describe the image", "write_file", "session channels"} {
		if !strings.Contains(fakemodel.StandInHelp, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

var listenLine = regexp.MustCompile(`^rtsandbox standin-model: listening on (http://127\.0\.0\.1:\d+/v1/chat/completions): a SCRIPTED STAND-IN, not a real LLM \((.*)\)\n$`)

// startStandin runs the command until the returned stop is called, which
// returns the exit code.
func startStandin(t *testing.T, getenv env, args ...string) (url, note string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"standin-model", "--listen", "127.0.0.1:0"}, args...), getenv, strings.NewReader(""), out, errOut)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for listenLine.FindStringSubmatch(out.String()) == nil {
		select {
		case code := <-done:
			t.Fatalf("standin-model exited %d: %s", code, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line: %q", out.String())
		}
	}
	m := listenLine.FindStringSubmatch(out.String())
	return m[1], m[2], func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("standin-model did not stop")
		}
		return -1
	}
}

func postStandin(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const standinAsk = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`

func TestStandinAnyKey(t *testing.T) {
	url, note, stop := startStandin(t, mapEnv(nil))
	if note != "any bearer key accepted" {
		t.Errorf("note = %q", note)
	}
	for _, key := range []string{"", "whatever"} {
		if code, body := postStandin(t, url, key, standinAsk); code != 200 || !strings.Contains(body, "remember that I drink tea") || !strings.Contains(body, "describe the image") {
			t.Errorf("POST with key %q = %d %s; want 200 and the stand-in's hint", key, code, body)
		}
	}
	if code, _ := postStandin(t, strings.Replace(url, "/chat/completions", "/messages", 1), "", standinAsk); code != 404 {
		t.Errorf("POST /v1/messages = %d; want 404 (no Anthropic wire)", code)
	}
	if code := stop(); code != exitOK {
		t.Errorf("exit = %d; want 0", code)
	}
}

func TestStandinKeyEnv(t *testing.T) {
	url, note, stop := startStandin(t, mapEnv(map[string]string{"RTS_STANDIN_KEY": "right"}), "--key-env", "RTS_STANDIN_KEY")
	if note != "bearer key from RTS_STANDIN_KEY required" {
		t.Errorf("note = %q", note)
	}
	if code, _ := postStandin(t, url, "wrong", standinAsk); code != 401 {
		t.Errorf("POST with the wrong key = %d; want 401", code)
	}
	if code, body := postStandin(t, url, "right", `{"messages":[{"role":"user","content":"remember that I drink tea"}],"tools":[{"type":"function","function":{"name":"memory_set","parameters":{"type":"object"}}}]}`); code != 200 || !strings.Contains(body, "memory_set") {
		t.Errorf("POST with the key = %d %s; want 200 and the memory_set call", code, body)
	}
	if code := stop(); code != exitOK {
		t.Errorf("exit = %d; want 0", code)
	}
}
