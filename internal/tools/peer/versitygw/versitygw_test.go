package versitygw_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"meridian/internal/kawkab"
	"meridian/internal/kawkab/objstoretest"
	"meridian/internal/kawkab/s3store"
	"meridian/internal/tools/peer/versitygw"
)

// gatewayBinary returns a versitygw binary, or skips: building one takes minutes of CPU, so
// the test runs only where it was built before (scripts/fetch-versitygw.sh) or is named.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv(versitygw.EnvBinary); b != "" {
		return b
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skipf("no home directory: %v", err)
	}
	cache := os.Getenv("MERIDIAN_CACHE")
	if cache == "" {
		cache = home + "/.cache/meridian"
	}
	b := cache + "/versitygw-" + versitygw.DefaultVersion + "/bin/versitygw"
	if _, err := os.Stat(b); err != nil {
		t.Skipf("no versitygw binary at %s: run scripts/fetch-versitygw.sh (or set %s)", b, versitygw.EnvBinary)
	}
	return b
}

func start(t *testing.T, o versitygw.Options) *versitygw.Gateway {
	t.Helper()
	// The process lives as long as the context: the test's whole run, not the start.
	o.StartTimeout = 2 * time.Minute
	g, err := versitygw.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// TestConformance runs the object-store conformance suite against a real VersityGW process
// through the S3 client: the gateway agrees with the memory, directory and gofakes3 stores on
// ranges, overwrites, deletes and listings across pages.
func TestConformance(t *testing.T) {
	bin := gatewayBinary(t)
	g := start(t, versitygw.Options{Binary: bin, Dir: t.TempDir(), AccessKey: "meridian-test", SecretKey: "not-a-real-secret-0123"})
	n := 0
	objstoretest.Run(t, func(t *testing.T) kawkab.ObjectStore {
		n++
		ctx := context.Background()
		s, err := s3store.New(ctx, g.Config("conformance-"+string(rune('a'+n%26))+strings.Repeat("x", n/26)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBucket(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}, objstoretest.Options{PathKeys: true})
	// The secret never reaches the gateway's output (it was passed in the environment).
	out, err := os.ReadFile(g.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "not-a-real-secret-0123") {
		t.Fatalf("the secret key appears in %s", g.LogFile())
	}
}

// TestWrongCredentialsRefused: the gateway checks signatures, so a client with the wrong
// secret gets an error and stores nothing; the right one then finds no object.
func TestWrongCredentialsRefused(t *testing.T) {
	bin := gatewayBinary(t)
	g := start(t, versitygw.Options{Binary: bin, Dir: t.TempDir()})
	ctx := context.Background()
	good, err := s3store.New(ctx, g.Config("bucket"))
	if err != nil {
		t.Fatal(err)
	}
	if err := good.CreateBucket(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := g.Config("bucket")
	cfg.SecretAccessKey = "wrong"
	bad, err := s3store.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Put(ctx, "k", []byte("v")); err == nil {
		t.Fatal("a put signed with the wrong secret succeeded")
	}
	if _, err := good.Get(ctx, "k", 0, -1); !errors.Is(err, kawkab.ErrNotFound) {
		t.Fatalf("get after the refused put: %v, want ErrNotFound", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	ctx := context.Background()
	for _, o := range []versitygw.Options{
		{},
		{Dir: t.TempDir(), Port: 70000},
		{Dir: t.TempDir(), AccessKey: "only-access"},
	} {
		if g, err := versitygw.Start(ctx, o); err == nil {
			g.Stop()
			t.Errorf("Start(%+v) succeeded", o)
		}
	}
}
