package config

import (
	"regexp"
	"sort"
)

// Keys lists every key the file format accepts that holds a value, not a
// table, as a dotted path without array indices: "node.listen",
// "tenants.model_limits.rpm". It probes the decoder's own schema, so a
// key the decoder accepts is listed here with no second list to keep.
func Keys() []string {
	var keys []string
	var walk func(at []step)
	walk = func(at []step) {
		for _, k := range probe(at, nil) {
			next := append(append([]step{}, at...), step{key: k})
			if probe(next, map[string]any{}) != nil {
				walk(next)
				continue
			}
			next[len(next)-1].array = true
			if probe(next, map[string]any{}) != nil {
				walk(next)
				continue
			}
			keys = append(keys, pathOf(next))
		}
	}
	walk(nil)
	sort.Strings(keys)
	return keys
}

// step is one key on the way down to a table: an array of tables when
// array is set.
type step struct {
	key   string
	array bool
}

func pathOf(at []step) string {
	p := ""
	for _, s := range at {
		p = join(p, s.key)
	}
	return p
}

// probe decodes a document holding an empty table (or an array of one)
// at the path at, and returns the keys the schema knows there: nil when
// the decoder does not take a table at that path.
func probe(at []step, empty map[string]any) []string {
	var v any = map[string]any{}
	if len(at) > 0 {
		v = empty
	}
	for i := len(at) - 1; i >= 0; i-- {
		if at[i].array {
			v = []any{v}
		}
		v = map[string]any{at[i].key: v}
	}
	d := &decoder{c: Default(), getenv: func(string) string { return "" }, tables: map[string][]string{}}
	d.table("", v, d.rootFields())
	return d.tables[pathOf(at)]
}

var arrayIndex = regexp.MustCompile(`\[\d+\]`)

// record notes the keys fields knows at path.
func (d *decoder) record(path string, fields map[string]field) {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	d.tables[arrayIndex.ReplaceAllString(path, "")] = names
}
