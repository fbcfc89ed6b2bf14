package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// FieldPaths lists the field paths of a JSON document read as the type of
// doc ("tests[].device_ms", "warmup.budget_ms"), sorted. A field the type
// declares as a map (levers, kernels_per_token, type_histogram, the launch
// census) is one path: its keys are data, not fields. The drift tests
// compare these sets between what minfer writes, the fixtures and the
// types.
func FieldPaths(data []byte, doc any) ([]string, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("field paths: %w", err)
	}
	set := map[string]bool{}
	walkPaths(v, reflect.TypeOf(doc), "", set)
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// walkPaths adds the paths under v (at prefix) to set, following t where
// it says what a field is (nil: an unknown field, walked as it is).
func walkPaths(v any, t reflect.Type, prefix string, set map[string]bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() == reflect.Map {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		fields := jsonFields(t)
		for k, x := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			set[p] = true
			walkPaths(x, fields[k], p, set)
		}
	case []any:
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for _, x := range v {
			walkPaths(x, elem, prefix+"[]", set)
		}
	}
}

// jsonFields maps the JSON names of struct type t's fields to their types
// (nil for a type that is not a struct).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
