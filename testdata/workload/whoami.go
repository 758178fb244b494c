package main

import (
	"fmt"
	"os"
	"strings"
)

// whoami describes the identity of this process, one "key=value" a line:
// uid, gid, groups and the effective capabilities (hex, as the kernel shows
// them), so a test can prove what the kubelet ran a container as.
func whoami() string {
	groups, _ := os.Getgroups()
	g := make([]string, len(groups))
	for i, n := range groups {
		g[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("uid=%d\ngid=%d\ngroups=%s\ncapeff=%s\n",
		os.Getuid(), os.Getgid(), strings.Join(g, ","), procStatus("CapEff"))
}

// procStatus returns a field of /proc/self/status, or "" when it is not there.
func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
