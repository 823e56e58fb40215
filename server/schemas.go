package server

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// The tools' output schemas come from the Go types of their
// structuredContent (outputSchema); the golden tools/list file
// (e2e/testdata/tools.golden.json) guards what clients see.

// schemaTag is the struct tag with codeexec's own schema options, besides
// jsonschema-go's "jsonschema" (a property's description):
//
//	schema:"optional"  the property is not required, although the field is
//	                   always there (no omitempty)
//	schema:"shallow"   the property is an object, or an array of objects,
//	                   declared without their properties (the parts of
//	                   sandbox_info that docs/tools.md describes)
const schemaTag = "schema"

// enums are the types whose values are a closed list, declared as enums.
var enums = func() map[reflect.Type]*jsonschema.Schema {
	modes := make([]any, len(sandbox.Modes))
	for i, m := range sandbox.Modes {
		modes[i] = string(m)
	}
	var reasons []any
	for _, r := range egress.Reasons() {
		reasons = append(reasons, string(r))
	}
	return map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[sandbox.Mode]():  {Type: "string", Enum: modes},
		reflect.TypeFor[egress.Reason](): {Type: "string", Enum: reasons},
	}
}()

// outputSchema is the JSON Schema of T for a tool's outputSchema: inferred
// by jsonschema-go (properties by their json names, descriptions from the
// jsonschema tags, the fields without omitempty required, enums for the
// types of enums), with the options of schemaTag, in the plain shape that
// tools/list has always declared (no additionalProperties, no null type).
// It panics if T cannot be described: the tools are declared at start.
func outputSchema[T any]() json.RawMessage {
	t := reflect.TypeFor[T]()
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: enums})
	if err != nil {
		panic(err)
	}
	applyTags(s, t)
	plain(s)
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// applyTags applies the options of schemaTag of t's fields to s, the
// schema of t, and of the types within.
func applyTags(s *jsonschema.Schema, t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			s = s.Items
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || s == nil {
		return
	}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p := s.Properties[name]
		if p == nil {
			continue
		}
		switch f.Tag.Get(schemaTag) {
		case "optional":
			s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == name })
		case "shallow":
			*p = jsonschema.Schema{Type: "object", Types: p.Types, Description: p.Description}
			if f.Type.Kind() == reflect.Slice {
				p.Type, p.Items = "array", &jsonschema.Schema{Type: "object"}
			}
			continue
		}
		applyTags(p, f.Type)
	}
}

// plain drops from s and the schemas within what jsonschema-go adds and
// the tools never declared: additionalProperties false, and null as a
// type of slices and pointers.
func plain(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	s.AdditionalProperties = nil
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	plain(s.Items)
	for _, p := range s.Properties {
		plain(p)
	}
}
