// Package blobtest gives tests of other packages a blob store on the
// S3-compatible server scripts/test starts (versitygw): a fresh bucket per
// test, emptied and removed when it ends; and (Server) that server's URL
// and credentials, for a test that opens a store of its own on it (a
// missing bucket, a wrong secret). Without KILN_TEST_S3_URL the
// test is skipped with one loud line (failed under KILN_REQUIRE_S3=1).
//
// What it must never do: reach anything but the loopback S3 server the
// test command started, or leave a bucket behind.
package blobtest
