// Package e2e holds Meridian's end-to-end, multi-process tests. It has no production code:
// the tests (in the _test.go files) build the meridian binary once, start real
// `meridian server` processes on distinct loopback addresses (127.0.0.2, 127.0.0.3,
// 127.0.0.4, one per region of the built-in topology gcp-meteorshower-3) with ports picked at
// run time, talk to them through the Go client (meridian/client) and the CLI, and kill them
// with SIGKILL to check what survives a crash.
//
// Run with `go test ./internal/e2e/`; `go test -short` skips them. Server logs are kept in the
// tests' temporary directories and their tails are printed when a test fails.
package e2e
