package blobtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kilnhq/kiln/internal/blob"
)

// S3 opens a blob store on a new bucket of the test S3 server.
func S3(t *testing.T) blob.Store {
	t.Helper()
	u, access, secret := Server(t)
	ep, _ := url.Parse(u.Query().Get("endpoint"))
	admin, err := minio.New(ep.Host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""),
		Region: u.Query().Get("region"), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s-%x", u.Host, rand.Uint64())
	if err := admin.MakeBucket(t.Context(), name, minio.MakeBucketOptions{Region: u.Query().Get("region")}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		results, err := admin.RemoveObjectsWithIter(ctx, name, admin.ListObjectsIter(ctx, name, minio.ListObjectsOptions{Recursive: true}), minio.RemoveObjectsOptions{})
		if err == nil {
			for range results {
			}
		}
		_ = admin.RemoveBucket(ctx, name)
	})
	u.Host = name
	st, err := blob.Open(t.Context(), u.String(), blob.Options{AccessKeyID: access, SecretAccessKey: secret})
	if err != nil {
		t.Fatalf("open the S3 store: %v", err)
	}
	return st
}

// Server is the test S3 server as KILN_TEST_S3_* describe it, or skips
// (fails under KILN_REQUIRE_S3=1): its store URL
// (s3://<bucket base name>/…?endpoint=http://127.0.0.1:PORT&region=…),
// access key and secret. It makes no bucket.
func Server(t *testing.T) (u *url.URL, accessKey, secretKey string) {
	t.Helper()
	raw := os.Getenv("KILN_TEST_S3_URL")
	if raw == "" {
		if os.Getenv("KILN_REQUIRE_S3") == "1" {
			t.Fatal("KILN_REQUIRE_S3=1 but KILN_TEST_S3_URL is not set (scripts/test starts versitygw)")
		}
		t.Skip("SKIP S3 SUITE: KILN_TEST_S3_URL not set (scripts/test starts versitygw)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("KILN_TEST_S3_URL: %v", err)
	}
	ep, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || ep.Hostname() != "127.0.0.1" {
		t.Fatalf("KILN_TEST_S3_URL: the endpoint must be http://127.0.0.1:PORT, got %q", u.Query().Get("endpoint"))
	}
	return u, os.Getenv("KILN_TEST_S3_ACCESS_KEY"), os.Getenv("KILN_TEST_S3_SECRET_KEY")
}
