// Package strictyaml decodes one YAML document into Go structs strictly: unknown fields,
// duplicate keys, wrong kinds and malformed values are errors that name the field path
// (for example "nodes[1].region") and the line. It also records where every field appeared,
// so that semantic checks made after decoding can point at a line too.
//
// It walks the yaml.v3 node tree itself instead of using Decoder.KnownFields(true), because
// KnownFields reports only "line N: field x not found in type T", without the path, and it
// does not reject duplicate keys in maps.
//
// Supported Go types: structs (fields named by their `yaml:"name"` tag, or the lower-cased
// field name), pointers, slices, maps with string keys, strings, bools, integers, floats and
// time.Duration (a Go duration string such as "2ms"; a bare 0 is accepted).
// A null value (an empty field, `~` or `null`) leaves the target at its zero value.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits on the decoded tree; YAML aliases can make a small document expand exponentially.
const (
	maxVisits = 200_000
	maxDepth  = 64
)

// Error is a decoding error at one field.
type Error struct {
	Path string // field path such as "nodes[1].region"; "" for the document itself
	Line int    // 1-based line, 0 when unknown
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Pos is where a field appeared in the document.
type Pos struct {
	Line int  // 1-based
	Null bool // the field was present with a null value
}

// Lines maps the path of every decoded field (struct field, map entry, sequence item) to
// its position.
type Lines map[string]Pos

// Has reports whether path was present in the document with a non-null value.
func (l Lines) Has(path string) bool {
	p, ok := l[path]
	return ok && !p.Null
}

// Line returns the line of path, or of its nearest recorded ancestor, or 0.
func (l Lines) Line(path string) int {
	for {
		if p, ok := l[path]; ok {
			return p.Line
		}
		parent, ok := Parent(path)
		if !ok {
			return 0
		}
		path = parent
	}
}

// Parent strips the last element of a path: "a.b[2]" -> "a.b", "a.b" -> "a", "a" -> "".
// It reports false for the empty path.
func Parent(path string) (string, bool) {
	if path == "" {
		return "", false
	}
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndex(path, "["); i >= 0 {
			return path[:i], true
		}
	}
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i], true
	}
	return "", true
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Key appends a field or map key to a path: Key("a", "b") = "a.b". Keys that are not plain
// words are quoted in brackets: Key("a", "x.y") = `a["x.y"]`.
func Key(path, key string) string {
	if !simpleKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index appends a sequence index to a path: Index("nodes", 1) = "nodes[1]".
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Unmarshal decodes exactly one YAML document from data into out, which must be a non-nil
// pointer. Empty input and more than one document are errors.
func Unmarshal(data []byte, out any) (Lines, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: "empty document"}
		}
		return nil, &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return nil, &Error{Line: extra.Line, Msg: "more than one YAML document"}
	}
	return Decode(&doc, out)
}

// Decode decodes a node (a document or its content) into out, a non-nil pointer.
func Decode(n *yaml.Node, out any) (Lines, error) {
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, fmt.Errorf("strictyaml: Decode needs a non-nil pointer, got %T", out)
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, &Error{Msg: "empty document"}
		}
		n = n.Content[0]
	}
	d := &decoder{lines: Lines{}}
	if isNull(n) {
		return nil, &Error{Line: n.Line, Msg: "empty document"}
	}
	if err := d.decode(n, v.Elem(), "", 0); err != nil {
		return nil, err
	}
	return d.lines, nil
}

type decoder struct {
	lines  Lines
	visits int
}

var durationType = reflect.TypeOf(time.Duration(0))

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "nothing"
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) error {
	return &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string, depth int) error {
	d.visits++
	if d.visits > maxVisits || depth > maxDepth {
		return d.errorf(n, path, "document too large or too deeply nested (after expanding aliases)")
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return d.errorf(n, path, "unresolved alias")
		}
		return d.decode(n.Alias, v, path, depth+1)
	}
	if isNull(n) {
		return nil // leave the zero value
	}
	if v.Type() == durationType {
		return d.duration(n, v, path)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(n, v.Elem(), path, depth+1)
	case reflect.Struct:
		return d.structure(n, v, path, depth)
	case reflect.Map:
		return d.mapping(n, v, path, depth)
	case reflect.Slice:
		return d.sequence(n, v, path, depth)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, path, "expected a string, got %s", kindName(n))
		}
		v.SetString(n.Value)
		return nil
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return d.scalar(n, v, path)
	}
	return fmt.Errorf("strictyaml: %s: unsupported Go type %s", path, v.Type())
}

func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) error {
	// Check the resolved tag first: yaml.v3 would silently truncate 1.5 to 1 for an int.
	var want string
	var tags []string
	switch v.Kind() {
	case reflect.Bool:
		want, tags = "true or false", []string{"!!bool"}
	case reflect.Float32, reflect.Float64:
		want, tags = "a number", []string{"!!int", "!!float"}
	default:
		want, tags = "an integer", []string{"!!int"}
		if v.Kind() >= reflect.Uint && v.Kind() <= reflect.Uint64 {
			want = "a non-negative integer"
		}
	}
	if n.Kind != yaml.ScalarNode || !slices.Contains(tags, n.ShortTag()) {
		return d.errorf(n, path, "expected %s, got %s", want, kindName(n))
	}
	tmp := reflect.New(v.Type())
	if err := n.Decode(tmp.Interface()); err != nil {
		return d.errorf(n, path, "expected %s, got %s", want, kindName(n))
	}
	v.Set(tmp.Elem())
	return nil
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.ScalarNode {
		return d.errorf(n, path, "expected a duration such as \"2ms\" or \"10s\", got %s", kindName(n))
	}
	dur, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return d.errorf(n, path, "invalid duration %q (want a Go duration such as \"2ms\" or \"10s\")", n.Value)
	}
	v.SetInt(int64(dur))
	return nil
}

// mappingPairs checks that n is a mapping with scalar, non-duplicate keys and returns its
// key and value nodes.
func (d *decoder) mappingPairs(n *yaml.Node, path string) (keys, values []*yaml.Node, err error) {
	if n.Kind != yaml.MappingNode {
		return nil, nil, d.errorf(n, path, "expected a mapping, got %s", kindName(n))
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return nil, nil, d.errorf(k, path, "mapping keys must be plain strings, got %s", kindName(k))
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			return nil, nil, d.errorf(k, path, "YAML merge keys (<<) are not supported")
		}
		if line, dup := seen[k.Value]; dup {
			return nil, nil, d.errorf(k, Key(path, k.Value), "duplicate key (first given at line %d)", line)
		}
		seen[k.Value] = k.Line
		keys = append(keys, k)
		values = append(values, val)
	}
	return keys, values, nil
}

func (d *decoder) record(path string, line int, val *yaml.Node) {
	null := isNull(val)
	if val.Kind == yaml.AliasNode && val.Alias != nil {
		null = isNull(val.Alias)
	}
	d.lines[path] = Pos{Line: line, Null: null}
}

func fieldName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("yaml")
	if tag == "-" {
		return "", false
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name, true
	}
	return strings.ToLower(f.Name), true
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string, depth int) error {
	keys, values, err := d.mappingPairs(n, path)
	if err != nil {
		return err
	}
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if name, ok := fieldName(t.Field(i)); ok {
			fields[name] = i
			names = append(names, name)
		}
	}
	for i, k := range keys {
		fp := Key(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			sort.Strings(names)
			return d.errorf(k, fp, "unknown field (known fields here: %s)", strings.Join(names, ", "))
		}
		d.record(fp, k.Line, values[i])
		if err := d.decode(values[i], v.Field(idx), fp, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string, depth int) error {
	if v.Type().Key().Kind() != reflect.String {
		return fmt.Errorf("strictyaml: %s: map keys must be strings, not %s", path, v.Type().Key())
	}
	keys, values, err := d.mappingPairs(n, path)
	if err != nil {
		return err
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(keys)))
	}
	for i, k := range keys {
		fp := Key(path, k.Value)
		d.record(fp, k.Line, values[i])
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(values[i], elem, fp, depth+1); err != nil {
			return err
		}
		v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	}
	return nil
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string, depth int) error {
	if n.Kind != yaml.SequenceNode {
		return d.errorf(n, path, "expected a list, got %s", kindName(n))
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := Index(path, i)
		d.record(ip, item.Line, item)
		if err := d.decode(item, s.Index(i), ip, depth+1); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}
