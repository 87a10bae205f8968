// Package parse is scripts/fuzzsmoke_test.go's module to fuzz: a parser
// whose branches the fuzzer can steer by.
package parse

import (
	"errors"
	"strconv"
	"strings"
)

// Pair parses "key=number".
func Pair(s string) (string, int, error) {
	key, num, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return "", 0, errors.New("parse: want key=number")
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return "", 0, err
	}
	return key, n, nil
}
