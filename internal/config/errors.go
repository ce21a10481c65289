package config

import (
	"fmt"
	"strings"
)

// Error is an invalid configuration. It names the field by its path in the file, e.g.
// "nodes[1].region" or "keyspaces[0].options.read_level", and, when the configuration came
// from YAML, the line.
type Error struct {
	// Subject is what is being validated: "config" (when empty) or, for ValidateKeyspace,
	// `keyspace "name"`.
	Subject string
	File    string // the configuration file; "" for Parse and programmatic configs
	Line    int    // 1-based line; 0 when unknown
	Path    string // field path; "" when the error is about the whole document
	Msg     string
	Err     error // underlying error, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	subject := e.Subject
	if subject == "" {
		subject = "config"
	}
	b.WriteString(subject)
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, " %s:%d", e.File, e.Line)
	case e.File != "":
		b.WriteString(" " + e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, ": line %d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}
