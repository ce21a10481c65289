package config

import (
	"errors"
	"strings"
	"testing"
)

// TestStreamsSection: defaults, every refusal with its field path, and parsed sizes.
func TestStreamsSection(t *testing.T) {
	c, err := Parse([]byte(base), "")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Streams
	if s.ObjectStore != StreamsEmbedded || s.Prefix != "kawkab" || s.UploadWorkers != 8 || s.LocalCapacityBytes != 10<<30 ||
		s.CacheBytes != 256<<20 || s.MaxBatchBytes != 1<<20 || s.SubscribeMaxLag != DefaultStreamSubscribeMaxLag {
		t.Fatalf("defaults: %+v", s)
	}
	c, err = Parse([]byte(base+"streams:\n  object_store: s3\n  s3: {endpoint: \"http://127.0.0.1:9000\", bucket: b, path_style: true, access_key_id_env: K, secret_access_key_env: S}\n  local_capacity: 1GiB\n  cache: 64MiB\n  upload_workers: 2\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Streams.S3.Bucket != "b" || c.Streams.LocalCapacityBytes != 1<<30 || c.Streams.UploadWorkers != 2 {
		t.Fatalf("s3: %+v", c.Streams)
	}
	for _, tc := range []struct{ yaml, path, msg string }{
		{"streams: {object_store: ftp}", "streams.object_store", "want embedded"},
		{"streams: {object_store: dir}", "streams.dir", "required with object_store: dir"},
		{"streams: {dir: x}", "streams.dir", "only for object_store: dir"},
		{"streams: {object_store: dir, dir: a/../b}", "streams.dir", "not a clean path"},
		{"streams: {object_store: s3}", "streams.s3.bucket", "required"},
		{"streams: {object_store: s3, s3: {bucket: b, endpoint: ftp://x}}", "streams.s3.endpoint", "http://"},
		{"streams: {object_store: s3, s3: {bucket: b, access_key_id_env: K}}", "streams.s3.access_key_id_env", "both"},
		{"streams: {s3: {bucket: b}}", "streams.s3", "only for object_store: s3"},
		{"streams: {prefix: /x}", "streams.prefix", "not starting"},
		{"streams: {upload_workers: 1000}", "streams.upload_workers", "1 to 256"},
		{"streams: {local_capacity: lots}", "streams.local_capacity", "want a size"},
		{"streams: {cache: 1KiB}", "streams.cache", "from 1.0MiB"},
		{"streams: {max_batch: 1GiB}", "streams.max_batch", "to 64MiB"},
		{"streams: {secret: x}", "streams.secret", "unknown field"},
	} {
		_, err := Parse([]byte(base+tc.yaml+"\n"), "")
		var e *Error
		if !errors.As(err, &e) || e.Path != tc.path || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v (path %q), want path %s and %q", tc.yaml, err, func() string {
				if e != nil {
					return e.Path
				}
				return ""
			}(), tc.path, tc.msg)
		}
	}
}
