package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is a configuration problem. Its message reads
// "File:Line: Key: Msg", leaving out the parts that are unknown.
type Error struct {
	File string // file name, or the override that set the key ("flag -listen", "env RINGGATE_LISTEN")
	Line int    // 1-based line in File; 0 if unknown
	Key  string // key path, e.g. "tenants[1].rpm"; "" for whole-file problems
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// parentPath strips the last ".key" or "[i]" from a key path.
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// errAt builds an error for key path, locating it by the override that set
// it or else by the line of the key (or of its nearest enclosing table).
func (c *Config) errAt(path, format string, args ...any) *Error {
	e := &Error{File: c.Path, Key: path, Msg: fmt.Sprintf(format, args...)}
	for p := path; p != ""; p = parentPath(p) {
		if o, ok := c.origin[p]; ok {
			e.File = o
			return e
		}
	}
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := c.lines.line(p); ok {
			e.Line = l
			break
		}
	}
	return e
}

// firstError returns the error on the earliest line (errors without a line
// first, since they come from flags or env), or nil.
func firstError(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return errs[0]
}
