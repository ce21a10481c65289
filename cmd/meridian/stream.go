package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meridian/client"
)

// streamCmd is `meridian stream …`: Kawkab's time-series streams (docs/streams.md).
func streamCmd() *cobra.Command {
	var endpoint string
	withClient := func(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
		if endpoint == "" {
			return fmt.Errorf("stream: --endpoint HOST:PORT is required")
		}
		c, err := client.Dial(endpoint)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd.Context(), c)
	}
	cmd := &cobra.Command{Use: "stream", Short: "Create, append to, read and tail time-series streams (docs/streams.md)"}
	cmd.PersistentFlags().StringVar(&endpoint, "endpoint", "", "node address HOST:PORT (any node: appends and reads go to the stream's primary)")

	var recordBytes, valueOffset int
	var fields []string
	var valueField, ack string
	create := &cobra.Command{
		Use:   "create KEYSPACE NAME (--record-bytes N [--value-offset O] | --field NAME:TYPE ... [--value-field NAME]) [--ack local|memory]",
		Short: "Create a stream of fixed-size records (the first 8 bytes are the timestamp)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			spec := &client.StreamSpec{Keyspace: a[0], Name: a[1], ValueField: valueField, Ack: ack}
			if recordBytes < 0 || valueOffset < 0 {
				return fmt.Errorf("create: --record-bytes and --value-offset must not be negative")
			}
			spec.RecordBytes, spec.ValueOffset = uint32(recordBytes), uint32(valueOffset)
			for _, f := range fields {
				sf, err := parseField(f)
				if err != nil {
					return err
				}
				spec.Fields = append(spec.Fields, sf)
			}
			if len(fields) == 0 && recordBytes == 0 {
				return fmt.Errorf("create: give --record-bytes N (16 to 4096) or a schema with --field NAME:TYPE (the first an int64 timestamp)")
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.CreateStream(ctx, spec)
				if err != nil {
					return err
				}
				printStreamInfo(os.Stdout, info)
				return nil
			})
		},
	}
	create.Flags().IntVar(&recordBytes, "record-bytes", 0, "record size in bytes, 16 to 4096 (without --field)")
	create.Flags().IntVar(&valueOffset, "value-offset", 0, "offset of the int64 that aggregates summarize (8 to record-bytes − 8; 0: none)")
	create.Flags().StringArrayVar(&fields, "field", nil, "a schema field NAME:TYPE, TYPE int64, float64 or bytes[N]; repeat in order, the first is the timestamp (int64)")
	create.Flags().StringVar(&valueField, "value-field", "", "the int64 field aggregates summarize (with --field)")
	create.Flags().StringVar(&ack, "ack", "", "when an append is acknowledged: local (default: fsynced on the primary), memory (written, not fsynced) or replicated (fsynced on the primary and on a second node)")
	cmd.AddCommand(create)

	var expectVersion uint64
	drop := &cobra.Command{
		Use: "drop KEYSPACE NAME", Short: "Drop a stream and its records", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.DropStream(ctx, a[0], a[1], expectVersion); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "dropped stream %s/%s\n", a[0], a[1])
				return nil
			})
		},
	}
	drop.Flags().Uint64Var(&expectVersion, "expect-version", 0, "drop only if the stream is at this version (from describe)")
	cmd.AddCommand(drop)

	cmd.AddCommand(&cobra.Command{
		Use: "list [KEYSPACE]", Short: "List streams", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ks := ""
			if len(a) == 1 {
				ks = a[0]
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				l, err := c.ListStreams(ctx, ks)
				if err != nil {
					return err
				}
				fmt.Printf("%-16s %-24s %8s %6s %-8s %s\n", "KEYSPACE", "STREAM", "ID", "BYTES", "ACK", "PRIMARY")
				for _, s := range l {
					fmt.Printf("%-16s %-24s %8d %6d %-8s %s\n", s.Spec.Keyspace, s.Spec.Name, s.Id, s.Spec.RecordBytes, s.Spec.Ack, s.Primary)
				}
				return nil
			})
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use: "describe KEYSPACE NAME", Short: "Describe a stream (at its primary: also its length)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.DescribeStream(ctx, a[0], a[1])
				if err != nil {
					return err
				}
				if !info.Live && info.PrimaryAddress != "" && info.PrimaryAddress != c.Endpoint() {
					if p, err := client.Dial(info.PrimaryAddress); err == nil {
						if pi, err := p.DescribeStream(ctx, a[0], a[1]); err == nil {
							info = pi
						}
						p.Close()
					}
				}
				printStreamInfo(os.Stdout, info)
				return nil
			})
		},
	})

	var generate, batch int
	var startTS, step string
	appendCmd := &cobra.Command{
		Use:   "append KEYSPACE NAME [--generate N]",
		Short: "Append records: lines 'timestamp,value' from stdin (timestamp in ns or RFC 3339), or N synthetic ones",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			if batch < 1 {
				return fmt.Errorf("append: --batch %d: want at least 1 record", batch)
			}
			if generate < 0 {
				return fmt.Errorf("append: --generate %d is negative", generate)
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				app, err := c.NewAppender(ctx, a[0], a[1])
				if err != nil {
					return err
				}
				defer app.Close()
				info := app.Info()
				R, voff := int(info.Spec.RecordBytes), int(info.Spec.ValueOffset)
				if voff == 0 {
					voff = -1
				}
				b := client.NewBatch(R, voff)
				var total uint64
				var first, last uint64
				flush := func() error {
					if b.Len() == 0 {
						return nil
					}
					f, err := app.Append(ctx, b.Bytes())
					if err != nil {
						return fmt.Errorf("append after %d records: %w", total, err)
					}
					if total == 0 {
						first = f
					}
					total += uint64(b.Len())
					last = f + uint64(b.Len()) - 1
					b.Reset()
					return nil
				}
				add := func(ts, v int64) error {
					b.Add(ts, v)
					if b.Len() >= batch {
						return flush()
					}
					return nil
				}
				if generate > 0 {
					t0 := time.Now().UnixNano()
					if startTS != "" {
						if t0, err = parseTimestamp(startTS); err != nil {
							return fmt.Errorf("append: --start: %w", err)
						}
					}
					d, err := time.ParseDuration(step)
					if err != nil || d < 0 {
						return fmt.Errorf("append: --step %q: want a non-negative duration such as 1ms", step)
					}
					for i := range generate {
						if err := add(t0+int64(i)*int64(d), int64(i)); err != nil {
							return err
						}
					}
				} else {
					if err := readCSV(os.Stdin, voff >= 0, add); err != nil {
						return err
					}
				}
				if err := flush(); err != nil {
					return err
				}
				if total == 0 {
					return fmt.Errorf("append: no records (stdin was empty)")
				}
				fmt.Fprintf(os.Stderr, "appended %d records to %s/%s (records %d to %d)\n", total, a[0], a[1], first, last)
				return nil
			})
		},
	}
	appendCmd.Flags().IntVar(&generate, "generate", 0, "append N synthetic records (timestamps from --start every --step, values 0, 1, 2, …) instead of reading stdin")
	appendCmd.Flags().IntVar(&batch, "batch", 1000, "records per batch")
	appendCmd.Flags().StringVar(&startTS, "start", "", "with --generate: the first timestamp (ns or RFC 3339; default now)")
	appendCmd.Flags().StringVar(&step, "step", "1ms", "with --generate: the time between records")
	cmd.AddCommand(appendCmd)

	var fromTS, toTS, format string
	var first, count uint64
	var byNumber, historical bool
	read := &cobra.Command{
		Use:   "read KEYSPACE NAME [--from TS --to TS | --first N [--count C]] [--historical] [--format text|csv|json]",
		Short: "Read records by time range (default: all) or by record number",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			pr, err := newRecordPrinter(format)
			if err != nil {
				return err
			}
			byNumber = cmd.Flags().Changed("first") || cmd.Flags().Changed("count")
			if byNumber && (fromTS != "" || toTS != "") {
				return fmt.Errorf("read: give a time range (--from, --to) or record numbers (--first, --count), not both")
			}
			tl, th, err := parseRange(fromTS, toTS)
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.DescribeStream(ctx, a[0], a[1])
				if err != nil {
					return err
				}
				var it *client.Records
				switch {
				case byNumber && historical:
					it = c.HistoricalRecords(ctx, a[0], a[1], first, count)
				case byNumber:
					it = c.ReadRecords(ctx, a[0], a[1], first, count)
				case historical:
					it = c.HistoricalRange(ctx, a[0], a[1], tl, th)
				default:
					it = c.ReadRange(ctx, a[0], a[1], tl, th)
				}
				if err := pr.print(os.Stdout, info, it); err != nil {
					return err
				}
				if historical && it.Uploaded() > 0 {
					fmt.Fprintf(os.Stderr, "historical read from the object store: it holds records 0 to %d; later ones are at the primary %s\n", it.Uploaded()-1, info.GetPrimary())
				}
				return nil
			})
		},
	}
	read.Flags().StringVar(&fromTS, "from", "", "the range's first timestamp (ns or RFC 3339; default: the beginning)")
	read.Flags().StringVar(&toTS, "to", "", "the range's last timestamp, inclusive (default: the end)")
	read.Flags().Uint64Var(&first, "first", 0, "read by record number from this one")
	read.Flags().Uint64Var(&count, "count", 0, "with --first: how many (0: to the end)")
	read.Flags().StringVar(&format, "format", "text", "text, csv or json (one object per line)")
	read.Flags().BoolVar(&historical, "historical", false, "read the records uploaded to the object store at the stream's reader node, without the primary")
	cmd.AddCommand(read)

	var tailFrom uint64
	var tailFormat string
	tail := &cobra.Command{
		Use:   "tail KEYSPACE NAME [--from N]",
		Short: "Print records as they are appended (from the end, or from record N) until interrupted",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			pr, err := newRecordPrinter(tailFormat)
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.DescribeStream(ctx, a[0], a[1])
				if err != nil {
					return err
				}
				it := c.Subscribe(ctx, a[0], a[1], client.SubscribeOptions{From: tailFrom, FromEnd: !cmd.Flags().Changed("from")})
				pr.flushEach = true
				return pr.print(os.Stdout, info, it)
			})
		},
	}
	tail.Flags().Uint64Var(&tailFrom, "from", 0, "start at this record number (default: new records only)")
	tail.Flags().StringVar(&tailFormat, "format", "text", "text, csv or json")
	cmd.AddCommand(tail)

	var aggFrom, aggTo string
	var aggHistorical bool
	agg := &cobra.Command{
		Use: "aggregate KEYSPACE NAME [--from TS --to TS]", Short: "Count, sum, min, max and mean of the stream's value over a time range", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			tl, th, err := parseRange(aggFrom, aggTo)
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				aggregate := c.Aggregate
				if aggHistorical {
					aggregate = c.HistoricalAggregate
				}
				g, err := aggregate(ctx, a[0], a[1], tl, th)
				if err != nil {
					return err
				}
				if g.Uploaded > 0 {
					fmt.Printf("uploaded records %d\n", g.Uploaded)
				}
				fmt.Printf("count %d\nsum %s\n", g.Count, g.Sum)
				if g.Count > 0 {
					fmt.Printf("min %d\nmax %d\nmean %g\n", g.Min, g.Max, g.Mean())
				}
				return nil
			})
		},
	}
	agg.Flags().StringVar(&aggFrom, "from", "", "first timestamp (ns or RFC 3339; default: the beginning)")
	agg.Flags().StringVar(&aggTo, "to", "", "last timestamp, inclusive (default: the end)")
	agg.Flags().BoolVar(&aggHistorical, "historical", false, "summarize the records uploaded to the object store, at the stream's reader node")
	cmd.AddCommand(agg)
	return cmd
}

var bytesFieldRE = regexp.MustCompile(`^bytes\[(\d+)\]$`)

// parseField parses NAME:TYPE.
func parseField(s string) (*client.StreamField, error) {
	name, typ, ok := strings.Cut(s, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("--field %q: want NAME:TYPE with TYPE int64, float64 or bytes[N]", s)
	}
	switch {
	case typ == "int64" || typ == "float64":
		return &client.StreamField{Name: name, Type: typ}, nil
	case bytesFieldRE.MatchString(typ):
		n, _ := strconv.Atoi(bytesFieldRE.FindStringSubmatch(typ)[1])
		return &client.StreamField{Name: name, Type: "bytes", Bytes: uint32(n)}, nil
	}
	return nil, fmt.Errorf("--field %q: type %q: want int64, float64 or bytes[N]", s, typ)
}

// parseTimestamp reads nanoseconds since the epoch or an RFC 3339 time.
func parseTimestamp(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: want nanoseconds since the epoch or an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t.UnixNano(), nil
}

func parseRange(from, to string) (int64, int64, error) {
	tl, th := int64(math.MinInt64), int64(math.MaxInt64)
	var err error
	if from != "" {
		if tl, err = parseTimestamp(from); err != nil {
			return 0, 0, fmt.Errorf("--from: %w", err)
		}
	}
	if to != "" {
		if th, err = parseTimestamp(to); err != nil {
			return 0, 0, fmt.Errorf("--to: %w", err)
		}
	}
	if tl > th {
		return 0, 0, fmt.Errorf("--from %s is after --to %s", from, to)
	}
	return tl, th, nil
}

// readCSV reads lines "timestamp,value" (value optional when the stream has none; blank
// lines and lines starting with # are skipped).
func readCSV(r io.Reader, hasValue bool, add func(ts, v int64) error) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		tsText, vText, hasV := strings.Cut(s, ",")
		if line == 1 && strings.EqualFold(strings.TrimSpace(tsText), "timestamp") {
			continue // a header
		}
		ts, err := parseTimestamp(tsText)
		if err != nil {
			return fmt.Errorf("stdin line %d: %w", line, err)
		}
		var v int64
		if hasV {
			if !hasValue {
				return fmt.Errorf("stdin line %d: a value, but the stream has no value field (created without --value-offset or --value-field)", line)
			}
			if v, err = strconv.ParseInt(strings.TrimSpace(vText), 10, 64); err != nil {
				return fmt.Errorf("stdin line %d: value %q is not an int64", line, strings.TrimSpace(vText))
			}
		}
		if err := add(ts, v); err != nil {
			return err
		}
	}
	return sc.Err()
}

func printStreamInfo(w io.Writer, s *client.StreamInfo) {
	fmt.Fprintf(w, "stream      %s/%s\nid          %d\nrecord      %d bytes\n", s.Spec.Keyspace, s.Spec.Name, s.Id, s.Spec.RecordBytes)
	for _, f := range s.Spec.Fields {
		t := f.Type
		if t == "bytes" {
			t = fmt.Sprintf("bytes[%d]", f.Bytes)
		}
		fmt.Fprintf(w, "field       %s %s\n", f.Name, t)
	}
	if s.Spec.ValueField != "" {
		fmt.Fprintf(w, "value       %s (offset %d)\n", s.Spec.ValueField, s.Spec.ValueOffset)
	} else if s.Spec.ValueOffset > 0 {
		fmt.Fprintf(w, "value       int64 at offset %d\n", s.Spec.ValueOffset)
	}
	fmt.Fprintf(w, "ack         %s\nprimary     %s (%s)\n", s.Spec.Ack, s.Primary, s.PrimaryAddress)
	if s.Reader != "" {
		fmt.Fprintf(w, "reader      %s (%s)\n", s.Reader, s.ReaderAddress)
	}
	fmt.Fprintf(w, "version     %d\n", s.Version)
	if s.Live {
		fmt.Fprintf(w, "records     %d\n", s.Records)
		if s.HasRecords {
			fmt.Fprintf(w, "last        %s (%d)\n", time.Unix(0, s.LastTimestamp).UTC().Format(time.RFC3339Nano), s.LastTimestamp)
		}
	}
}

// recordPrinter prints records: by the stream's schema, or timestamp, value and the other
// bytes in hex.
type recordPrinter struct {
	format string
	// flushEach: print every record at once (tail).
	flushEach bool
}

func newRecordPrinter(format string) (*recordPrinter, error) {
	switch format {
	case "text", "csv", "json":
		return &recordPrinter{format: format}, nil
	}
	return nil, fmt.Errorf("--format %q: want text, csv or json", format)
}

type column struct {
	name string
	typ  string
	off  int
	n    int
}

func columns(info *client.StreamInfo) []column {
	var cols []column
	if len(info.Spec.Fields) > 0 {
		off := 0
		for _, f := range info.Spec.Fields {
			w := 8
			if f.Type == "bytes" {
				w = int(f.Bytes)
			}
			cols = append(cols, column{f.Name, f.Type, off, w})
			off += w
		}
		return cols
	}
	R, voff := int(info.Spec.RecordBytes), int(info.Spec.ValueOffset)
	cols = append(cols, column{"timestamp", "int64", 0, 8})
	if voff >= 8 {
		if voff > 8 {
			cols = append(cols, column{"bytes_8", "bytes", 8, voff - 8})
		}
		cols = append(cols, column{"value", "int64", voff, 8})
		if voff+8 < R {
			cols = append(cols, column{fmt.Sprintf("bytes_%d", voff+8), "bytes", voff + 8, R - voff - 8})
		}
	} else if R > 8 {
		cols = append(cols, column{"bytes_8", "bytes", 8, R - 8})
	}
	return cols
}

func (c column) value(rec []byte) any {
	b := rec[c.off : c.off+c.n]
	switch c.typ {
	case "int64":
		return int64(binary.LittleEndian.Uint64(b))
	case "float64":
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return hex.EncodeToString(b)
}

// printRecords prints records already read (tests).
func (p *recordPrinter) printRecords(w io.Writer, info *client.StreamInfo, recs []client.Record) error {
	i := -1
	return p.each(w, info, func() (client.Record, bool) {
		i++
		if i >= len(recs) {
			return client.Record{}, false
		}
		return recs[i], true
	}, func() error { return nil })
}

func (p *recordPrinter) print(w io.Writer, info *client.StreamInfo, it *client.Records) error {
	return p.each(w, info, func() (client.Record, bool) {
		if !it.Next() {
			return client.Record{}, false
		}
		return it.Record(), true
	}, it.Err)
}

func (p *recordPrinter) each(w io.Writer, info *client.StreamInfo, next func() (client.Record, bool), errf func() error) error {
	cols := columns(info)
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	if p.format == "csv" {
		names := []string{"record"}
		for _, c := range cols {
			names = append(names, c.name)
		}
		fmt.Fprintln(bw, strings.Join(names, ","))
	}
	for {
		r, ok := next()
		if !ok {
			break
		}
		switch p.format {
		case "csv":
			fmt.Fprintf(bw, "%d", r.Number)
			for _, c := range cols {
				fmt.Fprintf(bw, ",%v", c.value(r.Bytes))
			}
			fmt.Fprintln(bw)
		case "json":
			m := map[string]any{"record": r.Number}
			for _, c := range cols {
				m[c.name] = c.value(r.Bytes)
			}
			b, _ := json.Marshal(m)
			bw.Write(append(b, '\n'))
		default:
			fmt.Fprintf(bw, "#%d %s", r.Number, time.Unix(0, r.Timestamp()).UTC().Format(time.RFC3339Nano))
			for _, c := range cols[1:] {
				fmt.Fprintf(bw, " %s=%v", c.name, c.value(r.Bytes))
			}
			fmt.Fprintln(bw)
		}
		if p.flushEach || bw.Buffered() > 32<<10 {
			bw.Flush()
		}
	}
	bw.Flush()
	return errf()
}
