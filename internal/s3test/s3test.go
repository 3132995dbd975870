// Package s3test gives a test a table location on the S3-compatible server
// scripts/s3.sh starts ($CDCAPPLY_S3_ENDPOINT): a fresh bucket, and the
// environment cdcapply and delta-rs read their S3 settings from. Without
// the endpoint a test skips, and under CI=true it fails, so a CI run
// cannot pass by testing less.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// The credentials the test server takes (it checks none); a run on real
// S3 sets its own in the environment.
const (
	accessKey = "cdcapply-test"
	secretKey = "cdcapply-test-secret"
	region    = "us-east-1"
)

// Endpoint returns the server's URL, or skips t (fails it under CI=true).
func Endpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv("CDCAPPLY_S3_ENDPOINT")
	if ep == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CDCAPPLY_S3_ENDPOINT is not set: start scripts/s3.sh (CI=true: an object-storage test may not skip)")
		}
		t.Skip("CDCAPPLY_S3_ENDPOINT is not set (scripts/s3.sh start)")
	}
	return ep
}

// Location makes a fresh bucket on the server and returns
// s3://bucket/table, with the process's AWS_* environment set for it (so
// a location given to cdcapply, or to a child process, reaches it).
func Location(t testing.TB) string {
	t.Helper()
	ep := Endpoint(t)
	for k, v := range Env(ep) {
		t.Setenv(k, v)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	bucket := "cdcapply-" + hex.EncodeToString(rnd[:])
	st, err := storage.NewS3(storage.S3Config{Bucket: bucket, Endpoint: ep, Region: region, PathStyle: true,
		AccessKeyID: accessKey, SecretAccessKey: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.CreateBucket(ctx); err != nil {
		t.Fatalf("create the test bucket on %s: %v", ep, err)
	}
	return "s3://" + bucket + "/table"
}

// Env is the AWS_* environment that points cdcapply and delta-rs at the
// server at endpoint.
func Env(endpoint string) map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL":      endpoint,
		"AWS_ENDPOINT_URL_S3":   endpoint,
		"AWS_SESSION_TOKEN":     "",
		"AWS_ACCESS_KEY_ID":     accessKey,
		"AWS_SECRET_ACCESS_KEY": secretKey,
		"AWS_REGION":            region,
		"AWS_ALLOW_HTTP":        "true",
	}
}
