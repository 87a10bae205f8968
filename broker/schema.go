package broker

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/rtsandbox/rtsandbox/jsontree"
)

// argSchema validates tool arguments host-side against the operator's
// declared JSON Schema (draft 2020-12 unless the schema says otherwise,
// which the local schema rule only allows as a fragment).
type argSchema struct {
	schema *jsonschema.Schema
}

// refuseLoader fails every external load: operator schemas are local, and
// the compiler must never reach the network or the file system for one.
type refuseLoader struct{}

var errRemoteSchema = errors.New("schema references are local only")

func (refuseLoader) Load(string) (any, error) { return nil, errRemoteSchema }

// compileSchema compiles one operator schema under a private in-memory
// location named after the tool.
func compileSchema(name string, params []byte) (*argSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("parameters are not JSON: %w", err)
	}
	loc := "urn:rtsandbox:" + name
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	return &argSchema{schema: s}, nil
}

// Why arguments are refused before any callback or upstream call, for
// the operator log (the guest gets the fixed text).
var (
	errRepeatedKey = errors.New("arguments repeat an object key")
	errArgsBudget  = errors.New("arguments hold more values than the body's size pays for")
	errArgsJSON    = errors.New("arguments are not JSON")
)

// check decodes raw arguments under the call's budget, refusing an object
// that repeats a key (errRepeatedKey), and validates them against the
// schema: nil when they pass, an error wrapping jsontree.ErrStopped once
// the call ended, else the refusal (a *jsonschema.ValidationError, or
// errRepeatedKey, errArgsBudget, errArgsJSON). Arguments are validated on
// their decoded value but forwarded as sent, and decoders disagree on
// which duplicate wins: a schema check of the last value would not cover
// an upstream that reads the first.
func (a *argSchema) check(b *jsontree.Budget, raw []byte) error {
	inst, err := b.DecodeUnique(raw)
	switch {
	case err == nil:
		return a.schema.Validate(inst)
	case errors.Is(err, jsontree.ErrStopped):
		return err
	case errors.Is(err, jsontree.ErrDuplicateKey):
		return errRepeatedKey
	case errors.Is(err, jsontree.ErrBudget):
		return errArgsBudget
	}
	return fmt.Errorf("%w: %w", errArgsJSON, err)
}

// argsRefusal answers arguments that check refused, in the sealed words:
// a call that ended fails, anything else is refArguments with the reason
// in the detail.
func argsRefusal(err error) outcome {
	if errors.Is(err, jsontree.ErrStopped) {
		return fail("call canceled")
	}
	o := refuse(refArguments)
	o.detail = schemaDetail(err)
	return o
}

// schemaDetail names the schema keyword that refused the arguments, for the
// operator log. It leaves out instance locations and values: those are
// guest data, and audit records are content-free.
func schemaDetail(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		for _, e := range []error{errRepeatedKey, errArgsBudget, errArgsJSON} {
			if errors.Is(err, e) {
				return e.Error()
			}
		}
		return "arguments refused by schema"
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	path := "/"
	if ve.ErrorKind != nil {
		for _, k := range ve.ErrorKind.KeywordPath() {
			path += k + "/"
		}
	}
	return "arguments refused by schema keyword " + path
}
