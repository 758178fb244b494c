// Package tunneltest helps test plug's tunnel without a cluster: an
// in-memory Platform, an agent on loopback, and a TCP proxy whose
// connections can be cut or silenced.
package tunneltest

import "plug/tunnel"

// Platform is the in-memory platform, with its record of calls.
type Platform = tunnel.MemoryPlatform

// NewPlatform returns an empty in-memory platform.
func NewPlatform() *Platform { return tunnel.NewMemoryPlatform() }
