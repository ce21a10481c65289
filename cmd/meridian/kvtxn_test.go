package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"meridian/api/meridianpb"
	"meridian/client"
)

func describeStmts(stmts []txnStmt) string {
	var parts []string
	for _, s := range stmts {
		p := fmt.Sprintf("%d:%s", s.line, s.op)
		if s.key != nil {
			p += fmt.Sprintf(" %q", s.key)
		}
		if s.value != nil {
			p += fmt.Sprintf(" %q", s.value)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " | ")
}

func TestParseTxnScript(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"semicolons", "get a; put a 1; delete b; commit", `1:get "a" | 1:put "a" "1" | 1:delete "b" | 1:commit`},
		{"newlines and blank lines", "get a\n\n  put a 1  \r\ncommit\n", `1:get "a" | 3:put "a" "1" | 4:commit`},
		{"implicit commit", "put k v", `1:put "k" "v"`},
		{"upper-case statements", "GET a; Put b c; ABORT", `1:get "a" | 1:put "b" "c" | 1:abort`},
		{"empty statements", ";;get a;;\n;", `1:get "a"`},
		{"double quotes with escapes", `put "a key" "a\tvalue; with \"quotes\""`, `1:put "a key" "a\tvalue; with \"quotes\""`},
		{"binary", `put "\x00\xff" ""`, `1:put "\x00\xff" ""`},
		{"single quotes as they are", `put 'x y' 'a\tb#c'`, `1:put "x y" "a\\tb#c"`},
		{"quoted parts join", `put a"b c"d e`, `1:put "ab cd" "e"`},
		{"comments", "# a transfer\nget a # the source\nput a 1;# done", `2:get "a" | 3:put "a" "1"`},
		{"utf-8", "put clé été", `1:put "clé" "été"`},
		{"abort ends it", "get a\nabort", `1:get "a" | 2:abort`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stmts, err := parseTxnScript(c.src)
			if err != nil {
				t.Fatalf("parse %q: %v", c.src, err)
			}
			if got := describeStmts(stmts); got != c.want {
				t.Errorf("parse %q:\n got %s\nwant %s", c.src, got, c.want)
			}
		})
	}
}

func TestParseTxnScriptErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"empty", "", []string{"no statements"}},
		{"only comments", "# nothing\n  ;\n", []string{"no statements"}},
		{"unknown statement", "get a\nset a 1", []string{"line 2", `unknown statement "set"`}},
		{"put without a value", "put a", []string{"line 1", "put takes 2 argument(s), got 1: put KEY VALUE"}},
		{"get with two keys", "get a b", []string{"line 1", "get takes 1 argument(s), got 2"}},
		{"commit with an argument", "commit now", []string{"commit takes 0 argument(s)"}},
		{"empty key", `get ""`, []string{"line 1", "get: the key is empty"}},
		{"unterminated double quote", "get a\n\nput \"a 1", []string{"line 3", "unterminated"}},
		{"unterminated single quote", "put 'a 1", []string{"line 1", "unterminated"}},
		{"bad escape", `put "\q" 1`, []string{"line 1", "invalid quoted string"}},
		{"statement after commit", "put a 1\ncommit\nget a", []string{"line 3", "get after commit (line 2)", "one transaction"}},
		{"statement after abort", "abort; get a", []string{"line 1", "get after abort (line 1)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseTxnScript(c.src)
			if err == nil {
				t.Fatalf("parse %q: no error", c.src)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("parse %q: error %q does not contain %q", c.src, err, w)
				}
			}
		})
	}
}

func TestAbortMessage(t *testing.T) {
	cases := []struct {
		err  client.AbortError
		want string
	}{
		{client.AbortError{Reason: "conflict", Key: []byte("alice"), Txn: "t1.2"}, "aborted: conflict (key alice), txn t1.2"},
		{client.AbortError{Reason: "snapshot too old"}, "aborted: snapshot too old"},
		{client.AbortError{Key: []byte("a b\n")}, `aborted (key "a b\n")`},
	}
	for _, c := range cases {
		if got := abortMessage(&c.err); got != c.want {
			t.Errorf("abortMessage(%+v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// abortingNode serves a transactional keyspace where "a" is 1 and every commit aborts on
// a conflict on "a" unless it writes "ok".
type abortingNode struct {
	meridianpb.UnimplementedMeridianServer
}

func (abortingNode) TxnRead(_ context.Context, r *meridianpb.TxnReadRequest) (*meridianpb.TxnReadResponse, error) {
	out := &meridianpb.TxnReadResponse{Snapshots: []*meridianpb.TxnSnapshot{{Partition: 0, Counter: 5}}}
	for _, k := range r.Keys {
		out.Values = append(out.Values, &meridianpb.TxnValue{Key: k, Found: string(k) == "a", Value: []byte("1"), Version: 4})
	}
	return out, nil
}

func (abortingNode) TxnCommit(_ context.Context, r *meridianpb.TxnCommitRequest) (*meridianpb.TxnCommitResponse, error) {
	for _, w := range r.Writes {
		if string(w.Key) == "ok" {
			return &meridianpb.TxnCommitResponse{Committed: true, Txn: "t1.7", Version: 6}, nil
		}
	}
	return &meridianpb.TxnCommitResponse{Reason: "conflict", Key: []byte("a"), Txn: "t1.8"}, nil
}

// A script's output, and an abort by the cluster as exit status 3 with one line.
func TestRunTxnScript(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	meridianpb.RegisterMeridianServer(s, abortingNode{})
	go s.Serve(lis)
	defer s.Stop()
	c, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(script string) (string, error) {
		stmts, err := parseTxnScript(script)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = runTxnScript(context.Background(), c.Begin("tx"), stmts, &out)
		return out.String(), err
	}
	out, err := run("get a; get b; put ok 1; get ok; delete ok; get ok; put ok 2")
	if err != nil || out != "a = 1\nb not found\nok = 1\nok not found\ncommitted txn t1.7 at version 6\n" {
		t.Errorf("committed script: %q, %v", out, err)
	}
	out, err = run("get a\nput a 2\ncommit")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 3 || err.Error() != "aborted: conflict (key a), txn t1.8" || out != "a = 1\n" {
		t.Errorf("aborted script: %q, %v (%T)", out, err, err)
	}
	out, err = run("put a 2; abort")
	if err != nil || out != "aborted by the script: nothing written\n" {
		t.Errorf("script that aborts: %q, %v", out, err)
	}
	out, err = run("put ok 1; delete ok")
	if err != nil || out != "committed txn t1.7 at version 6\n" {
		t.Errorf("a script whose write is a delete: %q, %v", out, err)
	}
}
