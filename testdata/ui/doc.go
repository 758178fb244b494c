// Package ui drives plug ui in headless Chromium against an agent on the
// test Kubernetes cluster that testdata/cluster/up.sh starts: the page's
// rows, grids, End, Accept and audit search, as a user would use them.
// Chromium is spoken to over the DevTools protocol on a pipe
// (--remote-debugging-pipe); deps.sh installs Debian's chromium. Run with
// `go test ./...` in this directory as root once up.sh has run; with
// CI=true the test fails when the cluster or Chromium is missing. It
// writes its screenshots to screenshots/.
package ui
