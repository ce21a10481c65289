package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"meridian/client"
)

// exitAborted is the exit status of `meridian kv txn` when the cluster aborted the
// transaction (a conflict): nothing was written, and running it again may commit.
const exitAborted = 3

// maxTxnScriptBytes bounds a script read from a file or stdin.
const maxTxnScriptBytes = 64 << 20

const txnScriptHelp = `The script is statements separated by ';' or newlines:

  get KEY          print KEY = VALUE, or KEY not found (a key the script wrote reads the write)
  put KEY VALUE    buffer a write
  delete KEY       buffer a deletion
  commit           submit the transaction (implicit at the end of the script)
  abort            end it without writing anything

commit or abort, if present, is the last statement. A word with spaces, ';' or '#' is quoted:
"..." with Go escapes ("a\tb", "\x00"), or '...' taken as it is. '#' starts a comment to the
end of the line. Reads are at one snapshot per partition; the writes are sent at commit, where
the transaction commits or aborts. Exit status: 0 committed (or aborted by the script), 3
aborted by the cluster (a conflict: nothing was written; run it again), 1 any other error (a
timeout at commit leaves the outcome unknown).`

// kvTxnCmd is `meridian kv txn`: a transaction on a transactional keyspace from a script.
func kvTxnCmd(withClient func(*cobra.Command, func(context.Context, *client.Client) error) error, opts func() []client.Option,
	consistency *string) *cobra.Command {
	var script, file string
	cmd := &cobra.Command{
		Use:   "txn KEYSPACE (-e SCRIPT | --file FILE|-)",
		Short: "Run a transaction on a transactional keyspace (txn_mode sdur or 2pc): get, put, delete, commit",
		Long:  "Runs one transaction on KEYSPACE.\n\n" + txnScriptHelp,
		Example: `  meridian kv txn accounts --endpoint 127.0.0.1:7101 -e 'get alice; get bob; put alice 70; put bob 30'
  printf 'get alice\nput alice 0\ncommit\n' | meridian kv txn accounts --endpoint 127.0.0.1:7101 --file -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if *consistency != "" {
				return fmt.Errorf("txn: --consistency does not apply (reads are at the transaction's snapshots, writes are certified at commit)")
			}
			if (script == "") == (file == "") {
				return fmt.Errorf("txn: give the script either with -e SCRIPT or with --file FILE (- for stdin), not both and not neither")
			}
			src := script
			if file != "" {
				var err error
				if src, err = readTxnScript(file, os.Stdin); err != nil {
					return err
				}
			}
			stmts, err := parseTxnScript(src)
			if err != nil {
				return fmt.Errorf("txn: %w", err)
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return runTxnScript(ctx, c.Begin(a[0], opts()...), stmts, os.Stdout)
			})
		},
	}
	cmd.Flags().StringVarP(&script, "execute", "e", "", "the script (statements separated by ';' or newlines)")
	cmd.Flags().StringVar(&file, "file", "", "read the script from FILE (- for stdin)")
	return cmd
}

func readTxnScript(path string, stdin io.Reader) (string, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("txn: --file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTxnScriptBytes+1))
	if err != nil {
		return "", fmt.Errorf("txn: reading the script: %w", err)
	}
	if len(b) > maxTxnScriptBytes {
		return "", fmt.Errorf("txn: the script is larger than %d bytes", maxTxnScriptBytes)
	}
	return string(b), nil
}

// txnStmt is one statement of a transaction script.
type txnStmt struct {
	line  int
	op    string // get, put, delete, commit, abort
	key   []byte
	value []byte
}

// parseTxnScript parses a transaction script (txnScriptHelp). Errors name the line.
func parseTxnScript(src string) ([]txnStmt, error) {
	var out []txnStmt
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		groups, err := splitTxnLine(strings.TrimSuffix(line, "\r"))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		for _, words := range groups {
			if len(words) == 0 {
				continue
			}
			if len(out) > 0 {
				if last := out[len(out)-1]; last.op == "commit" || last.op == "abort" {
					return nil, fmt.Errorf("line %d: %s after %s (line %d): a script is one transaction, and %s ends it", n, words[0], last.op, last.line, last.op)
				}
			}
			st, err := parseTxnStmt(words)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			st.line = n
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the script has no statements (get KEY, put KEY VALUE, delete KEY, commit, abort)")
	}
	return out, nil
}

func parseTxnStmt(words []string) (txnStmt, error) {
	op := strings.ToLower(words[0])
	args := words[1:]
	want := map[string]int{"get": 1, "put": 2, "delete": 1, "commit": 0, "abort": 0}
	usage := map[string]string{"get": "get KEY", "put": "put KEY VALUE", "delete": "delete KEY", "commit": "commit", "abort": "abort"}
	n, ok := want[op]
	if !ok {
		return txnStmt{}, fmt.Errorf("unknown statement %q (want get KEY, put KEY VALUE, delete KEY, commit or abort)", words[0])
	}
	if len(args) != n {
		return txnStmt{}, fmt.Errorf("%s takes %d argument(s), got %d: %s", op, n, len(args), usage[op])
	}
	st := txnStmt{op: op}
	if n >= 1 {
		if args[0] == "" {
			return txnStmt{}, fmt.Errorf("%s: the key is empty", op)
		}
		st.key = []byte(args[0])
	}
	if n == 2 {
		st.value = []byte(args[1])
	}
	return st, nil
}

// splitTxnLine splits one line into statements (at ';') of words (at white space), with
// quoting and comments as txnScriptHelp says.
func splitTxnLine(line string) ([][]string, error) {
	var groups [][]string
	var words []string
	for i := 0; i < len(line); {
		r, size := utf8.DecodeRuneInString(line[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case r == ';':
			groups, words = append(groups, words), nil
			i++
		case r == '#':
			i = len(line)
		default:
			w, next, err := txnWord(line, i)
			if err != nil {
				return nil, err
			}
			words = append(words, w)
			i = next
		}
	}
	return append(groups, words), nil
}

// txnWord reads the word starting at line[i]: quoted parts and bare characters up to white
// space, ';' or '#' (so "a"b is ab). It returns the word and the index after it.
func txnWord(line string, i int) (string, int, error) {
	var b strings.Builder
	for i < len(line) {
		r, size := utf8.DecodeRuneInString(line[i:])
		switch {
		case unicode.IsSpace(r) || r == ';' || r == '#':
			return b.String(), i, nil
		case r == '"':
			q, err := strconv.QuotedPrefix(line[i:])
			if err != nil {
				return "", 0, fmt.Errorf("unterminated or invalid quoted string at column %d: %s", i+1, line[i:])
			}
			s, _ := strconv.Unquote(q)
			b.WriteString(s)
			i += len(q)
		case r == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return "", 0, fmt.Errorf("unterminated quoted string at column %d: %s", i+1, line[i:])
			}
			b.WriteString(line[i+1 : i+1+end])
			i += end + 2
		default:
			b.WriteString(line[i : i+size])
			i += size
		}
	}
	return b.String(), i, nil
}

// runTxnScript runs stmts in tx, printing each get and the outcome on out. An abort by the
// cluster is an exit status 3 error.
func runTxnScript(ctx context.Context, tx *client.Txn, stmts []txnStmt, out io.Writer) error {
	for _, st := range stmts {
		var err error
		switch st.op {
		case "get":
			var v []byte
			var found bool
			if v, found, err = tx.Get(ctx, st.key); err == nil {
				if found {
					fmt.Fprintf(out, "%s = %s\n", showKey(st.key), v)
				} else {
					fmt.Fprintf(out, "%s not found\n", showKey(st.key))
				}
			}
		case "put":
			err = tx.Put(st.key, st.value)
		case "delete":
			err = tx.Delete(st.key)
		case "abort":
			tx.Abort()
			fmt.Fprintln(out, "aborted by the script: nothing written")
			return nil
		case "commit":
			return commitTxn(ctx, tx, out)
		}
		if err != nil {
			tx.Abort()
			return fmt.Errorf("txn: line %d (%s): %w", st.line, st.op, err)
		}
	}
	return commitTxn(ctx, tx, out)
}

func commitTxn(ctx context.Context, tx *client.Txn, out io.Writer) error {
	res, err := tx.Commit(ctx)
	var abort *client.AbortError
	switch {
	case errors.As(err, &abort):
		return exitError{code: exitAborted, err: errors.New(abortMessage(abort))}
	case client.CodeOf(err) == codes.DeadlineExceeded:
		return fmt.Errorf("txn: commit: %w (the outcome is unknown: the transaction may have committed)", err)
	case err != nil:
		return fmt.Errorf("txn: commit: %w", err)
	case res.Txn == "":
		fmt.Fprintln(out, "committed (nothing to send: the transaction read nothing from the cluster and wrote nothing)")
	default:
		fmt.Fprintf(out, "committed txn %s at version %d\n", res.Txn, res.Version)
	}
	return nil
}

// abortMessage is the one line that reports an abort: aborted: REASON (key K).
func abortMessage(a *client.AbortError) string {
	msg := "aborted: " + a.Reason
	if a.Reason == "" {
		msg = "aborted"
	}
	if len(a.Key) > 0 {
		msg += " (key " + showKey(a.Key) + ")"
	}
	if a.Txn != "" {
		msg += ", txn " + a.Txn
	}
	return msg
}

// showKey prints a key as it is when it is printable without spaces, else quoted.
func showKey(k []byte) string {
	s := string(k)
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
