package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"meridian/internal/kawkab"
	"meridian/internal/kawkab/objstoretest"
	"meridian/internal/kawkab/s3store"
)

func startServer(t *testing.T, dir string) *s3store.Server {
	t.Helper()
	srv, err := s3store.StartServer(dir, s3store.ServerOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

func newStore(t *testing.T, cfg s3store.Config) *s3store.Store {
	t.Helper()
	s, err := s3store.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// The conformance suite against the embedded gofakes3, through the AWS SDK: each subtest has a
// bucket of its own.
func TestConformance(t *testing.T) {
	srv := startServer(t, t.TempDir())
	var n int
	objstoretest.Run(t, func(t *testing.T) kawkab.ObjectStore {
		n++
		return newStore(t, srv.Config(fmt.Sprintf("bucket-%d", n)))
	}, objstoretest.Options{})
}

// countingTransport counts the requests of each kind the SDK sends.
type countingTransport struct {
	lists atomic.Int64
	all   atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.all.Add(1)
	if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" {
		c.lists.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// List follows ListObjectsV2's continuation tokens: 50 keys at 7 per page take 8 requests.
func TestListPagination(t *testing.T) {
	srv := startServer(t, t.TempDir())
	counter := &countingTransport{}
	cfg := srv.Config("paged")
	cfg.ListPageKeys = 7
	cfg.HTTPClient = &http.Client{Transport: counter}
	s := newStore(t, cfg)
	ctx := context.Background()
	var want []string
	for i := range 50 {
		key := fmt.Sprintf("p/%03d", i)
		want = append(want, key)
		if err := s.Put(ctx, key, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	counter.lists.Store(0)
	infos, err := s.List(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, in.Key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List = %q", got)
	}
	if n := counter.lists.Load(); n != 8 {
		t.Errorf("%d ListObjectsV2 requests, want 8", n)
	}
}

// The embedded server keeps its objects in its directory across restarts.
func TestServerPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	srv, err := s3store.StartServer(dir, s3store.ServerOptions{Buckets: []string{"kawkab"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := s3store.New(ctx, srv.Config("kawkab"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "kawkab/s1/d0", []byte("chunk zero")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "kawkab/s1/d1", []byte("x")); err == nil {
		t.Fatal("Put to a closed server succeeded")
	}
	srv = startServer(t, dir) // a new port
	s, err = s3store.New(ctx, srv.Config("kawkab"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "kawkab/s1/d0", 6, -1); err != nil || string(got) != "zero" {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

// Errors say the operation, key and bucket; only a missing key is kawkab.ErrNotFound.
func TestErrors(t *testing.T) {
	srv := startServer(t, t.TempDir())
	ctx := context.Background()
	s := newStore(t, srv.Config("errs"))
	_, err := s.Get(ctx, "no/such/key", 0, -1)
	if !errors.Is(err, kawkab.ErrNotFound) || !strings.Contains(err.Error(), `get "no/such/key" in bucket "errs"`) {
		t.Errorf("missing key: %v", err)
	}
	if err := s.Put(ctx, "k", make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "k", 5, 10)
	if !errors.Is(err, kawkab.ErrInvalidRange) || errors.Is(err, kawkab.ErrNotFound) {
		t.Errorf("range past the end: %v", err)
	}
	missing, err := s3store.New(ctx, srv.Config("no-such-bucket"))
	if err != nil {
		t.Fatal(err)
	}
	err = missing.Put(ctx, "k", []byte("x"))
	if err == nil || errors.Is(err, kawkab.ErrNotFound) || !strings.Contains(err.Error(), `"no-such-bucket"`) {
		t.Errorf("put to a missing bucket: %v, want an error naming the bucket, not ErrNotFound", err)
	}
	if _, err := missing.List(ctx, ""); err == nil || !strings.Contains(err.Error(), `"no-such-bucket"`) {
		t.Errorf("list of a missing bucket: %v", err)
	}
	for name, cfg := range map[string]s3store.Config{
		"no bucket":       {Endpoint: srv.Endpoint()},
		"half credential": {Bucket: "b", AccessKeyID: "id"},
		"negative page":   {Bucket: "b", ListPageKeys: -1},
	} {
		if _, err := s3store.New(ctx, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Why Server.Config turns the SDK's default checksums off: gofakes3 returns the whole object's
// CRC32 with a ranged GET, and the SDK then rejects the range. Whole objects work either way.
func TestGofakes3NeedsChecksumsWhenRequired(t *testing.T) {
	srv := startServer(t, t.TempDir())
	ctx := context.Background()
	cfg := srv.Config("checksums")
	cfg.ChecksumsWhenRequired = false
	s := newStore(t, cfg)
	data := []byte(strings.Repeat("kawkab", 1000))
	if err := s.Put(ctx, "k", data); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "k", 0, -1); err != nil || string(got) != string(data) {
		t.Fatalf("whole object with default checksums: %d bytes, %v", len(got), err)
	}
	if _, err := s.Get(ctx, "k", 10, 100); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Logf("ranged GET with default checksums now works (%v): ChecksumsWhenRequired may be unneeded", err)
	}
}

// With the server's default page (1,000 keys, as S3), 1,001 keys take two LIST requests.
func TestListDefaultPage(t *testing.T) {
	srv := startServer(t, t.TempDir())
	counter := &countingTransport{}
	cfg := srv.Config("default-page")
	cfg.HTTPClient = &http.Client{Transport: counter}
	s := newStore(t, cfg)
	ctx := context.Background()
	const keys = 1001
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < keys; i += 8 {
				if err := s.Put(ctx, fmt.Sprintf("k/%04d", i), nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	counter.lists.Store(0)
	infos, err := s.List(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != keys || infos[0].Key != "k/0000" || infos[keys-1].Key != "k/1000" {
		t.Fatalf("List returned %d keys", len(infos))
	}
	if n := counter.lists.Load(); n != 2 {
		t.Errorf("%d ListObjectsV2 requests, want 2", n)
	}
}
