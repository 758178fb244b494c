//go:build !unix

package swarmapi

// socketOwner has nothing to add where sockets carry no unix ownership.
func socketOwner(string) string { return "" }
