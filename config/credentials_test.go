package config

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCredentialsListsEveryEnvVar sets every field of type EnvVar the
// configuration can hold (found by walking its types, so a new *_env key
// is found too) to a distinct name, and requires Credentials to list each.
func TestCredentialsListsEveryEnvVar(t *testing.T) {
	c := &Config{}
	n := 0
	fill(reflect.ValueOf(c).Elem(), &n)
	if n < 8 {
		t.Fatalf("found %d EnvVar fields; the walk missed some", n)
	}
	var got []string
	for _, cr := range c.Credentials() {
		got = append(got, string(cr.Var))
	}
	slices.Sort(got)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("VAR_%02d", i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Credentials misses an EnvVar of the configuration (-want +got):\n%s", diff)
	}
}

// fill gives every EnvVar under v a distinct name, making one element of
// each slice and map and one value of each pointer on the way.
func fill(v reflect.Value, n *int) {
	envVar := reflect.TypeFor[EnvVar]()
	switch {
	case v.Type() == envVar:
		v.SetString(fmt.Sprintf("VAR_%02d", *n))
		*n++
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), n)
	case v.Kind() == reflect.Map && v.Type().Elem().Kind() == reflect.Struct && v.Type().Key().Kind() == reflect.String:
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, n)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf("m").Convert(v.Type().Key()), e)
	}
}
