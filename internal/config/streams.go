package config

import (
	"path/filepath"
	"strings"

	"github.com/dustin/go-humanize"
)

// Streams configures every node's stream service (Kawkab, docs/streams.md): where the
// object-store tier lives and the local resources a node gives its streams. Every field has
// a default; the section may be left out.
type Streams struct {
	// ObjectStore: embedded (the default: an S3-compatible server, gofakes3, inside the
	// node's process on <data>/streams-objects), dir (a local directory, Dir), or s3 (any
	// S3-compatible endpoint, S3).
	ObjectStore string `yaml:"object_store"`
	// Dir is the directory of object_store: dir; a relative path is relative to each
	// node's data directory.
	Dir string `yaml:"dir"`
	// S3 is the endpoint of object_store: s3.
	S3 StreamsS3 `yaml:"s3"`
	// Prefix starts every object key (default "kawkab"): a stream's uploads are
	// <prefix>/s<stream ID>/… (stream IDs are unique in the cluster, so every node's
	// uploads share it and any node reads any stream's).
	Prefix string `yaml:"prefix"`
	// UploadWorkers upload sealed chunks concurrently (default 8, the thesis's; 1 to 256).
	UploadWorkers int `yaml:"upload_workers"`
	// LocalCapacity bounds the local chunk store (default 10GiB); Cache the buffer cache
	// (default 256MiB). Sizes like 10GiB or 500MB.
	LocalCapacity string `yaml:"local_capacity"`
	Cache         string `yaml:"cache"`
	// MaxBatch bounds one appended batch (default 1MiB: 65,536 16-byte records, and the
	// client listener's receive limit stays the KV API's; 16KiB to 64MiB).
	MaxBatch string `yaml:"max_batch"`
	// SubscribeMaxLag is the default and largest lag, in records, of a tail subscriber that
	// has caught up (default 1,000,000): one that falls further behind is ended.
	SubscribeMaxLag uint64 `yaml:"subscribe_max_lag"`

	// Parsed forms (set by validation).
	LocalCapacityBytes, CacheBytes, MaxBatchBytes uint64 `yaml:"-"`
}

// StreamsS3 is an S3-compatible endpoint. Credentials are never in the file: the names of
// the environment variables holding them are (empty: the AWS SDK's default chain —
// AWS_ACCESS_KEY_ID, shared files, instance roles).
type StreamsS3 struct {
	Endpoint  string `yaml:"endpoint"`
	Region    string `yaml:"region"`
	Bucket    string `yaml:"bucket"`
	PathStyle bool   `yaml:"path_style"`
	// AccessKeyIDEnv, SecretAccessKeyEnv, SessionTokenEnv name environment variables.
	AccessKeyIDEnv     string `yaml:"access_key_id_env"`
	SecretAccessKeyEnv string `yaml:"secret_access_key_env"`
	SessionTokenEnv    string `yaml:"session_token_env"`
}

// Object store kinds.
const (
	StreamsEmbedded = "embedded"
	StreamsDir      = "dir"
	StreamsS3Store  = "s3"
)

// Stream defaults.
const (
	DefaultStreamUploadWorkers   = 8
	DefaultStreamLocalCapacity   = "10GiB"
	DefaultStreamCache           = "256MiB"
	DefaultStreamMaxBatch        = "1MiB"
	DefaultStreamSubscribeMaxLag = 1_000_000
	DefaultStreamPrefix          = "kawkab"
)

func (c *Cluster) validateStreams() error {
	s := &c.Streams
	if s.ObjectStore == "" {
		s.ObjectStore = StreamsEmbedded
	}
	switch s.ObjectStore {
	case StreamsEmbedded, StreamsDir, StreamsS3Store:
	default:
		return errorf("streams.object_store", "%q: want embedded (an S3-compatible server in the node's process), dir or s3", s.ObjectStore)
	}
	if s.ObjectStore == StreamsDir && s.Dir == "" {
		return errorf("streams.dir", "required with object_store: dir (a directory; relative paths are under each node's data directory)")
	}
	if s.ObjectStore != StreamsDir && s.Dir != "" {
		return errorf("streams.dir", "only for object_store: dir (object_store is %s)", s.ObjectStore)
	}
	if s.Dir != "" && filepath.Clean(s.Dir) != s.Dir && filepath.Clean(s.Dir)+"/" != s.Dir {
		return errorf("streams.dir", "%q is not a clean path (write %q)", s.Dir, filepath.Clean(s.Dir))
	}
	if s.ObjectStore == StreamsS3Store {
		if s.S3.Bucket == "" {
			return errorf("streams.s3.bucket", "required with object_store: s3")
		}
		if s.S3.Endpoint != "" && !strings.HasPrefix(s.S3.Endpoint, "http://") && !strings.HasPrefix(s.S3.Endpoint, "https://") {
			return errorf("streams.s3.endpoint", "%q: want an http:// or https:// URL (empty: Amazon S3)", s.S3.Endpoint)
		}
		if (s.S3.AccessKeyIDEnv == "") != (s.S3.SecretAccessKeyEnv == "") {
			return errorf("streams.s3.access_key_id_env", "give both access_key_id_env and secret_access_key_env (the names of environment variables), or neither for the AWS SDK's default chain")
		}
	} else if s.S3 != (StreamsS3{}) {
		return errorf("streams.s3", "only for object_store: s3 (object_store is %s)", s.ObjectStore)
	}
	if s.Prefix == "" {
		s.Prefix = DefaultStreamPrefix
	}
	if len(s.Prefix) > 256 || strings.ContainsAny(s.Prefix, "\x00") || strings.HasPrefix(s.Prefix, "/") || strings.HasSuffix(s.Prefix, "/") {
		return errorf("streams.prefix", "%q: want up to 256 bytes, no NUL, not starting or ending with /", s.Prefix)
	}
	if s.UploadWorkers == 0 {
		s.UploadWorkers = DefaultStreamUploadWorkers
	}
	if s.UploadWorkers < 1 || s.UploadWorkers > 256 {
		return errorf("streams.upload_workers", "%d: want 1 to 256", s.UploadWorkers)
	}
	for _, f := range []struct {
		field, def string
		v          *string
		out        *uint64
		lo, hi     uint64
	}{
		{"local_capacity", DefaultStreamLocalCapacity, &s.LocalCapacity, &s.LocalCapacityBytes, 64 << 20, 1 << 50},
		{"cache", DefaultStreamCache, &s.Cache, &s.CacheBytes, 1 << 20, 1 << 40},
		{"max_batch", DefaultStreamMaxBatch, &s.MaxBatch, &s.MaxBatchBytes, 16 << 10, 64 << 20},
	} {
		if *f.v == "" {
			*f.v = f.def
		}
		n, err := humanize.ParseBytes(strings.TrimSpace(*f.v))
		if err != nil || n < f.lo || n > f.hi {
			return errorf("streams."+f.field, "%q: want a size from %s to %s, e.g. %s", *f.v,
				strings.ReplaceAll(humanize.IBytes(f.lo), " ", ""), strings.ReplaceAll(humanize.IBytes(f.hi), " ", ""), f.def)
		}
		*f.out = n
	}
	if s.SubscribeMaxLag == 0 {
		s.SubscribeMaxLag = DefaultStreamSubscribeMaxLag
	}
	return nil
}

// ValidateStreams fills in the defaults of a streams section built in code and checks it.
func ValidateStreams(s *Streams) error {
	c := &Cluster{Streams: *s}
	err := c.validateStreams()
	*s = c.Streams
	return err
}
