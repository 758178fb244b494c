package swarmapi

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// MinAPIVersion is the oldest Engine API plug works with: Docker 20.10.
	MinAPIVersion = "1.41"
	// MaxAPIVersion is the newest Engine API whose changes plug has read
	// against what it sends and reads: Docker 29.0. Newer engines are spoken
	// to at this version.
	MaxAPIVersion = "1.52"
)

// Version is the engine's answer to GET /version.
type Version struct {
	Version       string // the engine's release, e.g. "20.10.24"
	APIVersion    string `json:"ApiVersion"`
	MinAPIVersion string `json:"MinAPIVersion"`
	Os            string
	Arch          string
}

// VersionError says the engine and plug share no API version.
type VersionError struct {
	Engine Version
	Reason string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("Docker engine %s (API %s, oldest %s): %s",
		e.Engine.Version, e.Engine.APIVersion, e.Engine.MinAPIVersion, e.Reason)
}

// negotiate picks the API version to speak with an engine: the engine's
// newest, capped at MaxAPIVersion.
func negotiate(v Version) (string, error) {
	if _, err := parseAPIVersion(v.APIVersion); err != nil {
		return "", &VersionError{Engine: v, Reason: "the engine did not say which API version it speaks: " + err.Error()}
	}
	if compareAPIVersions(v.APIVersion, MinAPIVersion) < 0 {
		return "", &VersionError{Engine: v, Reason: fmt.Sprintf(
			"plug needs API %s or newer (Docker 20.10 or newer); upgrade Docker on this node", MinAPIVersion)}
	}
	use := v.APIVersion
	if compareAPIVersions(use, MaxAPIVersion) > 0 {
		use = MaxAPIVersion
	}
	if v.MinAPIVersion != "" && compareAPIVersions(use, v.MinAPIVersion) < 0 {
		return "", &VersionError{Engine: v, Reason: fmt.Sprintf(
			"the engine no longer speaks API %s, the newest this plug knows; update the agent's image to a plug release that speaks API %s", use, v.MinAPIVersion)}
	}
	return use, nil
}

// parseAPIVersion splits "1.41" into its numbers.
func parseAPIVersion(s string) ([2]int, error) {
	major, minor, ok := strings.Cut(s, ".")
	a, errA := strconv.Atoi(major)
	b, errB := strconv.Atoi(minor)
	if !ok || errA != nil || errB != nil || a < 0 || b < 0 {
		return [2]int{}, fmt.Errorf("%q is not an API version like 1.41", s)
	}
	return [2]int{a, b}, nil
}

// compareAPIVersions returns -1, 0 or +1 as a is older than, equal to or
// newer than b. A version that does not parse sorts as the oldest.
func compareAPIVersions(a, b string) int {
	va, _ := parseAPIVersion(a)
	vb, _ := parseAPIVersion(b)
	for i := range va {
		switch {
		case va[i] < vb[i]:
			return -1
		case va[i] > vb[i]:
			return 1
		}
	}
	return 0
}
