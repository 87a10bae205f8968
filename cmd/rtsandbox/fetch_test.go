package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFetchRefusesLocalTargets: literals and /etc/hosts names that point at
// loopback, private or metadata addresses exit 3 naming the class, and a
// listener on the loopback port accepts nothing.
func TestFetchRefusesLocalTargets(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct{ name, url string }{
		{"loopback-literal", "http://127.0.0.1:" + port + "/"},
		{"localhost-name", "http://localhost:" + port + "/"},
		{"localhost-upper", "http://LOCALHOST:" + port + "/"},
		{"loopback-decimal", "http://2130706433:" + port + "/"},
		{"loopback-hex", "http://0x7f000001:" + port + "/"},
		{"loopback-short", "http://127.1:" + port + "/"},
		{"loopback-v6", "http://[::1]:" + port + "/"},
		{"loopback-mapped", "http://[::ffff:127.0.0.1]:" + port + "/"},
		{"unspecified", "http://0.0.0.0:" + port + "/"},
		{"private-10", "http://10.0.0.1:" + port + "/"},
		{"private-192-168", "http://192.168.1.1/"},
		{"metadata", "http://169.254.169.254/latest/meta-data/"},
		{"metadata-hex", "http://0xA9FEA9FE/latest/meta-data/"},
		{"metadata-v6", "http://[fd00:ec2::254]/latest/meta-data/"},
		{"redirect-free-no-redirects", "--no-redirects http://127.0.0.1:" + port + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"fetch"}, strings.Fields(tc.url)...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code := run(ctx, args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
			if code != exitFetchRefused {
				t.Fatalf("fetch %s = %d (stderr %q); want %d", tc.url, code, stderr.String(), exitFetchRefused)
			}
			if got := stderr.String(); !strings.Contains(got, "non-public") || strings.Count(got, "\n") != 1 {
				t.Errorf("stderr %q; want one line naming the non-public class", got)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q; want nothing", stdout.String())
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the loopback listener accepted %d connections; want 0", n)
	}
}

func TestFetchUsageAndSchemes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no-url", nil, exitUsage, "usage"},
		{"two-urls", []string{"http://a.test/", "http://b.test/"}, exitUsage, "usage"},
		{"max-bytes-fraction", []string{"--max-bytes", "1.5", "http://a.test/"}, exitUsage, "max-bytes"},
		{"max-bytes-nan", []string{"--max-bytes", "NaN", "http://a.test/"}, exitUsage, "max-bytes"},
		{"max-bytes-zero", []string{"--max-bytes", "0", "http://a.test/"}, exitUsage, "out of range"},
		{"max-bytes-over", []string{"--max-bytes", "33554433", "http://a.test/"}, exitUsage, "out of range"},
		{"timeout-zero", []string{"--timeout", "0s", "http://a.test/"}, exitUsage, "out of range"},
		{"timeout-over", []string{"--timeout", "120001ms", "http://a.test/"}, exitUsage, "out of range"},
		{"file", []string{"file:///etc/passwd"}, exitFetchRefused, "Only credential-free HTTP(S) URLs are allowed"},
		{"credentials", []string{"http://user:pass@127.0.0.1/"}, exitFetchRefused, "credential-free"},
		{"invalid", []string{"http://256.0.0.1/"}, exitFetchRefused, "Invalid URL"},
		{"zone", []string{"http://[fe80::1%25lo]/"}, exitFetchRefused, "Invalid URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"fetch"}, tc.args...), func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.msg) || stdout.Len() != 0 {
				t.Fatalf("fetch %v = %d, stderr %q, stdout %q; want %d mentioning %q", tc.args, code, stderr.String(), stdout.String(), tc.code, tc.msg)
			}
		})
	}
}
