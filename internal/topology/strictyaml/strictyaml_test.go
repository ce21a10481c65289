package strictyaml

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	N int           `yaml:"n"`
	D time.Duration `yaml:"d"`
}

type doc struct {
	Name  string            `yaml:"name"`
	Items []inner           `yaml:"items"`
	Opts  map[string]string `yaml:"opts"`
	F     float64           `yaml:"f"`
	U     uint32            `yaml:"u"`
	P     *int              `yaml:"p"`
}

func TestDecode(t *testing.T) {
	src := `name: x
items:
  - n: 1
    d: 2ms
  - {n: 2, d: 0}
opts: {a: 1, b: "two"}
f: 1.5
u: 7
p: ~
`
	var d doc
	lines, err := Unmarshal([]byte(src), &d)
	if err != nil {
		t.Fatal(err)
	}
	want := doc{Name: "x", Items: []inner{{1, 2 * time.Millisecond}, {2, 0}}, Opts: map[string]string{"a": "1", "b": "two"}, F: 1.5, U: 7}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	for path, line := range map[string]int{"name": 1, "items": 2, "items[0]": 3, "items[0].d": 4, "items[1].n": 5, "opts.b": 6, "p": 9} {
		if got := lines.Line(path); got != line {
			t.Errorf("Line(%q) = %d, want %d", path, got, line)
		}
	}
	if !lines.Has("items[1].d") || lines.Has("p") || lines.Has("missing") {
		t.Errorf("Has: explicit zero must count, null and absent must not")
	}
	if got := lines.Line("items[1].unknown"); got != 5 {
		t.Errorf("Line falls back to the parent: got %d, want 5", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct{ src, path, msg string }{
		{"nme: x\n", "nme", "unknown field"},
		{"items: [{n: 1, m: 2}]\n", "items[0].m", "unknown field"},
		{"name: x\nname: y\n", "name", "duplicate key"},
		{"opts: {a: 1, a: 2}\n", "opts.a", "duplicate key"},
		{"items: [{d: fast}]\n", "items[0].d", "invalid duration"},
		{"items: [{d: 10}]\n", "items[0].d", "invalid duration"},
		{"items: [{n: 1.5}]\n", "items[0].n", "expected an integer"},
		{"u: -1\n", "u", "non-negative"},
		{"f: [1]\n", "f", "expected a number"},
		{"name: {a: 1}\n", "name", "expected a string"},
		{"items: {a: 1}\n", "items", "expected a list"},
		{"opts: {a: {b: c}}\n", "opts.a", "expected a string"},
		{"[1]\n", "", "expected a mapping"},
		{"", "", "empty"},
		{"name: a\n---\nname: b\n", "", "more than one"},
		{"name: [\n", "", "line"},
		{"base: &b {n: 1}\nitems: [{<<: *b}]\n", "", "unknown field"},
	}
	for _, c := range cases {
		var d doc
		_, err := Unmarshal([]byte(c.src), &d)
		if err == nil {
			t.Errorf("%q: no error", c.src)
			continue
		}
		e, ok := err.(*Error)
		if !ok {
			t.Errorf("%q: error %T", c.src, err)
			continue
		}
		if c.path != "" && e.Path != c.path {
			t.Errorf("%q: path %q, want %q (%v)", c.src, e.Path, c.path, err)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: error %q does not contain %q", c.src, err, c.msg)
		}
	}
}

func TestAliasBomb(t *testing.T) {
	src := `a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
`
	var out struct {
		A []string     `yaml:"a"`
		B [][]string   `yaml:"b"`
		C [][][]string `yaml:"c"`
		D [][][][]string
		E [][][][][]string
		F [][][][][][]string
		G [][][][][][][]string
	}
	_, err := Unmarshal([]byte(src), &out)
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("alias bomb: err = %v, want a size error", err)
	}
}

func TestKeyAndParent(t *testing.T) {
	if got := Key(Index("nodes", 1), "region"); got != "nodes[1].region" {
		t.Errorf("got %q", got)
	}
	if got := Key("opts", "a.b"); got != `opts["a.b"]` {
		t.Errorf("got %q", got)
	}
	for path, parent := range map[string]string{"a.b[2]": "a.b", "a.b": "a", "a": "", `o["x"]`: "o"} {
		if got, _ := Parent(path); got != parent {
			t.Errorf("Parent(%q) = %q, want %q", path, got, parent)
		}
	}
}
