package s3store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	bolt "go.etcd.io/bbolt"
)

// ServerOptions tunes StartServer.
type ServerOptions struct {
	// Buckets are created at start unless they exist.
	Buckets []string
	// NoSync skips the fsync of each write of the bolt file: faster, for tests whose directory
	// is thrown away; a crash of the machine can then lose the latest objects.
	NoSync bool
}

// Server is an S3-compatible server (gofakes3) running in this process on 127.0.0.1 at a
// random port, keeping its buckets in one bolt file, dir/gofakes3.bolt. It does not check
// signatures: any credentials are accepted.
type Server struct {
	endpoint string
	srv      *http.Server
	db       *bolt.DB
	served   chan error
}

// BoltFile is the file, in the server's directory, that holds every bucket.
const BoltFile = "gofakes3.bolt"

// StartServer starts a server on the directory dir (created if needed).
func StartServer(dir string, opts ServerOptions) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("s3store: server directory: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, BoltFile), 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: opts.NoSync})
	if err != nil {
		return nil, fmt.Errorf("s3store: server: opening %s: %w", filepath.Join(dir, BoltFile), err)
	}
	backend := &lockedBolt{Backend: s3bolt.New(db)}
	for _, b := range opts.Buckets {
		exists, err := backend.BucketExists(b)
		if err == nil && !exists {
			err = backend.CreateBucket(b)
		}
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("s3store: server: bucket %q: %w", b, err)
		}
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("s3store: server: %w", err)
	}
	s := &Server{
		endpoint: "http://" + ln.Addr().String(),
		srv:      &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 30 * time.Second},
		db:       db,
		served:   make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Endpoint is the server's URL, http://127.0.0.1:port.
func (s *Server) Endpoint() string { return s.endpoint }

// Config is a client configuration for the server and bucket: path-style addressing, static
// credentials (ignored by the server), region us-east-1, checksums only when required (gofakes3
// does not read aws-chunked trailers).
func (s *Server) Config(bucket string) Config {
	return Config{
		Endpoint:              s.endpoint,
		Region:                "us-east-1",
		Bucket:                bucket,
		PathStyle:             true,
		AccessKeyID:           "meridian",
		SecretAccessKey:       "meridian",
		ChecksumsWhenRequired: true,
	}
}

// Close stops the server, ending open connections, and closes its bolt file.
func (s *Server) Close() error {
	err := s.srv.Close()
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if derr := s.db.Close(); err == nil {
		err = derr
	}
	return err
}

// lockedBolt fixes a data race of gofakes3 v1.2.0's bolt backend: GetObject decodes the stored
// object with mgo's bson, whose []byte fields alias their input, so the object's contents
// point into bolt's memory map after the read transaction has ended, where a concurrent write
// can reuse the page (the conformance suite's concurrent puts and gets read torn objects).
// Here a GET copies the contents out under a read lock that every write excludes. Request
// bodies are read before the write lock is taken, so uploads still overlap on the network.
type lockedBolt struct {
	*s3bolt.Backend
	mu sync.RWMutex
}

var _ gofakes3.Backend = (*lockedBolt)(nil)

func (b *lockedBolt) GetObject(bucket, key string, rng *gofakes3.ObjectRangeRequest) (*gofakes3.Object, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	obj, err := b.Backend.GetObject(bucket, key, rng)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(obj.Contents)
	obj.Contents.Close()
	if err != nil {
		return nil, err
	}
	obj.Contents = io.NopCloser(bytes.NewReader(data))
	obj.Hash = bytes.Clone(obj.Hash)
	return obj, nil
}

func (b *lockedBolt) HeadObject(bucket, key string) (*gofakes3.Object, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	obj, err := b.Backend.HeadObject(bucket, key)
	if err == nil {
		obj.Hash = bytes.Clone(obj.Hash)
	}
	return obj, err
}

func (b *lockedBolt) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64, conditions *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	data, err := gofakes3.ReadAll(input, size)
	if err != nil {
		return gofakes3.PutObjectResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.PutObject(bucket, key, meta, bytes.NewReader(data), size, conditions)
}

func (b *lockedBolt) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
}

func (b *lockedBolt) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteObject(bucket, key)
}

func (b *lockedBolt) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteMulti(bucket, keys...)
}

func (b *lockedBolt) CreateBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.CreateBucket(name)
}

func (b *lockedBolt) DeleteBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.DeleteBucket(name)
}

func (b *lockedBolt) ForceDeleteBucket(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Backend.ForceDeleteBucket(name)
}
