package tunnel

import (
	"strings"
	"testing"
)

func FuzzDecodeStatus(f *testing.F) {
	fuzzDecoder(f, decodeMsg[statusMsg],
		`{"type":"status"}`,
		`{"type":"status","version":"v1.2.3","agent":"plug-0","platform":"Kubernetes namespace ns","refusing":"lacks\nrights",`+
			`"rights":[{"rule":"patch services","feature":"-s","required":true,"granted":false,"fix":"kubectl -n ns patch role plug --type=json -p '[]'"}],`+
			`"rights_error":"\u001b[2J"}`,
		`{"rights":[]}`)
}

func TestDecodeStatusRefusesWhatIsTooLarge(t *testing.T) {
	many := `{"rights":[` + strings.Repeat(`{"rule":"r"},`, maxStatusRights) + `{"rule":"r"}]}`
	if _, err := decodeMsg[statusMsg]([]byte(many)); err == nil {
		t.Errorf("a status with %d rights was accepted", maxStatusRights+1)
	}
	long := `{"version":"` + strings.Repeat("v", maxShortField+1) + `"}`
	if _, err := decodeMsg[statusMsg]([]byte(long)); err == nil {
		t.Error("a status with a version longer than a short field was accepted")
	}
}

func TestCompatibleVersions(t *testing.T) {
	for _, tc := range []struct {
		cli, agent string
		ok         bool
		says       string
	}{
		{"v1.4.0", "v1.4.0", true, "the same plug v1.4.0 on both ends"},
		{"v1.4.0", "v1.4.7-3-gabc1234", true, "compatible (same major version)"},
		{"v1.4.0", "v1.5.0", true, "differ in minor version: compatible (same major version); to align them, run plug update -p work"},
		{"v2.0.0", "v1.9.0", false, "different major versions, which do not work together; re-apply the agent's manifest with plug's image of v2.0.0"},
		{"v1.0.0", "v2.1.0", false, "different major versions, which do not work together; run plug update -p work"},
		{"dev", "97d9f9b", true, "not releases"},
	} {
		ok, says := Compatible(tc.cli, tc.agent, "work")
		if ok != tc.ok || !strings.Contains(says, tc.says) {
			t.Errorf("Compatible(%q, %q) = %t, %q; want %t and %q", tc.cli, tc.agent, ok, says, tc.ok, tc.says)
		}
	}
}

func TestAgentVersionFromTheSSHVersionString(t *testing.T) {
	for in, want := range map[string]string{
		"SSH-2.0-plug_v1.2.3":     "v1.2.3",
		"SSH-2.0-plug_v1.2.3_4_g": "v1.2.3_4_g",
		"SSH-2.0-OpenSSH_9.2p1":   "",
	} {
		if got := agentVersion(in); got != want {
			t.Errorf("agentVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
