// Package s3store is Kawkab's object store over the S3 API (kawkab.ObjectStore; thesis 5.3.2,
// the global store), and an S3-compatible server that runs inside the process for tests and the
// demo. It is a package of its own so that the S3 client and server, heavy dependencies, stay
// out of package kawkab.
//
// Why these libraries:
//
//   - The client is the official AWS SDK for Go v2 (github.com/aws/aws-sdk-go-v2/service/s3,
//     with its config and credentials modules; Apache-2.0): it is the S3 API as AWS defines
//     and maintains it (signing, retries, ranged GETs, ListObjectsV2 pagination, error codes),
//     and it speaks to any endpoint — Amazon S3, or an S3-compatible server such as the one
//     the benchmarks and the lab run as its own process (VersityGW), MinIO (the thesis's
//     stand-in for S3, 5.7) or the embedded server below — by configuration alone.
//   - The embedded server is gofakes3 (github.com/johannesboyne/gofakes3; MIT): pure Go, so it
//     runs in the test's own process on 127.0.0.1 with nothing to install or start, and it
//     implements the parts of the S3 API Kawkab uses (PUT, ranged GET, DELETE, ListObjectsV2
//     with continuation tokens). Its bolt backend keeps a bucket in one file of a local
//     directory, so the demo's objects survive a restart and any key S3 allows can be stored
//     (its afero backend maps keys to file paths, and cannot hold both "a" and "a/b").
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"meridian/internal/kawkab"
)

// Config says which S3 endpoint and bucket a Store uses.
type Config struct {
	// Endpoint is the service's URL, e.g. "http://127.0.0.1:9000"; empty: Amazon S3's own
	// endpoint for the region.
	Endpoint string
	// Region signs the requests; empty: the default chain's (AWS_REGION, the shared config
	// file), else "us-east-1".
	Region string
	// Bucket holds the objects.
	Bucket string
	// PathStyle addresses the bucket in the path (http://host/bucket/key) rather than in the
	// host name (http://bucket.host/key); most S3-compatible servers want it.
	PathStyle bool
	// AccessKeyID and SecretAccessKey (and SessionToken, optional) are static credentials;
	// empty: the SDK's default chain (environment, shared files, instance role, …).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// ListPageKeys is the max-keys of each ListObjectsV2 request; 0: the server's default
	// (1,000 on S3).
	ListPageKeys int32
	// ChecksumsWhenRequired computes and validates the SDK's flexible checksums (CRC32 and
	// others) only when an operation requires them, as SDKs did before 2025, instead of on
	// every PUT and GET. Servers that do not implement them need it: gofakes3 keeps a PUT's
	// CRC32 header and returns it with ranged GETs, whose partial body then fails the SDK's
	// validation. Uploads are still covered by the SHA-256 of the signed payload.
	ChecksumsWhenRequired bool
	// HTTPClient, when set, sends the requests (tests count them with it).
	HTTPClient *http.Client
}

// Store is a kawkab.ObjectStore over the S3 API; safe for concurrent use.
type Store struct {
	client *s3.Client
	bucket string
	page   int32
}

var _ kawkab.ObjectStore = (*Store)(nil)

// New returns a Store for cfg; it sends no request.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3store: no bucket configured")
	}
	if cfg.ListPageKeys < 0 {
		return nil, fmt.Errorf("s3store: list page of %d keys", cfg.ListPageKeys)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("s3store: static credentials need both an access key ID and a secret key")
	}
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3store: loading the AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		if cfg.HTTPClient != nil {
			// Set here rather than in the loaded configuration, which would try to give
			// it the CA bundle of AWS_CA_BUNDLE.
			o.HTTPClient = cfg.HTTPClient
		}
		if cfg.ChecksumsWhenRequired {
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	return &Store{client: client, bucket: cfg.Bucket, page: cfg.ListPageKeys}, nil
}

// CreateBucket creates the store's bucket unless it exists already (and is the caller's).
func (s *Store) CreateBucket(ctx context.Context) error {
	_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err == nil || errors.As(err, &owned) || errors.As(err, &exists) {
		// gofakes3 says BucketAlreadyExists for the caller's own bucket too.
		return nil
	}
	return fmt.Errorf("s3store: create bucket %q: %w", s.bucket, err)
}

// wrap gives an SDK error the operation's context and maps S3's missing key and unsatisfiable
// range to kawkab.ErrNotFound and kawkab.ErrInvalidRange.
func (s *Store) wrap(op, key string, err error) error {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	switch {
	case errors.As(err, &nsk), errors.As(err, &nf),
		errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound"):
		return fmt.Errorf("s3store: %s %q in bucket %q: %w: %w", op, key, s.bucket, kawkab.ErrNotFound, err)
	case errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange",
		errors.As(err, &re) && re.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("s3store: %s %q in bucket %q: %w: %w", op, key, s.bucket, kawkab.ErrInvalidRange, err)
	}
	return fmt.Errorf("s3store: %s %q in bucket %q: %w", op, key, s.bucket, err)
}

// Put implements kawkab.ObjectStore with one PutObject.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := kawkab.ValidateKey(key); err != nil {
		return err
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return s.wrap("put", key, err)
	}
	return nil
}

// Get implements kawkab.ObjectStore. A range is one GetObject with a Range header; as S3 clamps
// a range that reaches past the end, a short answer is reported as kawkab.ErrInvalidRange. The
// cases a Range header cannot say — n == 0, and the empty range at the very end — cost a
// HeadObject for the size.
func (s *Store) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := kawkab.ValidateKey(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, s.checkRange(ctx, key, off, n) // not found, or the range error
	}
	if n == 0 {
		if err := s.checkRange(ctx, key, off, n); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	switch {
	case n > 0:
		if off > (1<<63-1)-n {
			return nil, s.checkRange(ctx, key, off, n)
		}
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		err = s.wrap("get", key, err)
		if n < 0 && errors.Is(err, kawkab.ErrInvalidRange) {
			// "bytes=size-" is unsatisfiable for S3, but the empty range at the end is valid.
			if cerr := s.checkRange(ctx, key, off, n); cerr != nil {
				return nil, cerr
			}
			return []byte{}, nil
		}
		return nil, err
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, s.wrap("get", key, err)
	}
	if n > 0 && int64(buf.Len()) != n {
		return nil, s.checkRange(ctx, key, off, n)
	}
	return buf.Bytes(), nil
}

// checkRange asks for the object's size and applies kawkab.CheckRange to it.
func (s *Store) checkRange(ctx context.Context, key string, off, n int64) error {
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return s.wrap("head", key, err)
	}
	var size int64
	if head.ContentLength != nil {
		size = *head.ContentLength
	}
	_, _, err = kawkab.CheckRange(key, size, off, n)
	if err == nil && n > 0 {
		// The object changed between the GET and the HEAD.
		return fmt.Errorf("s3store: get %q in bucket %q: answered with a short range, and the object now has %d bytes", key, s.bucket, size)
	}
	return err
}

// Delete implements kawkab.ObjectStore with one DeleteObject (idempotent in S3).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := kawkab.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}); err != nil {
		err = s.wrap("delete", key, err)
		if errors.Is(err, kawkab.ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// List implements kawkab.ObjectStore with ListObjectsV2, following continuation tokens.
func (s *Store) List(ctx context.Context, prefix string) ([]kawkab.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := kawkab.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if s.page > 0 {
		in.MaxKeys = aws.Int32(s.page)
	}
	var out []kawkab.ObjectInfo
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3store: list %q in bucket %q (after %d keys): %w", prefix, s.bucket, len(out), err)
		}
		for _, o := range page.Contents {
			info := kawkab.ObjectInfo{Key: aws.ToString(o.Key)}
			if o.Size != nil {
				info.Size = *o.Size
			}
			out = append(out, info)
		}
	}
	// S3 lists in UTF-8 byte order already; other servers may not.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
