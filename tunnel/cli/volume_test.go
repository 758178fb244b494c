package cli

import (
	"strings"
	"testing"

	"plug/tunnel"
)

func TestParseVolume(t *testing.T) {
	for _, c := range []struct {
		arg, profile, local string
		req                 tunnel.VolumeRequest
	}{
		{"deploy/web:data", "", "", tunnel.VolumeRequest{Kind: tunnel.WorkloadDeployment, Name: "web", Volume: "data"}},
		{"sts/db:pgdata:./pg", "", "./pg", tunnel.VolumeRequest{Kind: tunnel.WorkloadStatefulSet, Name: "db", Volume: "pgdata"}},
		{"prod/pod/web-1:cfg:C:\\cfg", "prod", "C:\\cfg", tunnel.VolumeRequest{Kind: tunnel.WorkloadPod, Name: "web-1", Volume: "cfg"}},
		{"service/api:/var/data:data", "", "data", tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: "api", Volume: "/var/data"}},
	} {
		profile, req, local, err := parseVolume(c.arg)
		if err != nil || profile != c.profile || req != c.req || local != c.local {
			t.Errorf("parseVolume(%q) = %q, %+v, %q, %v", c.arg, profile, req, local, err)
		}
	}
	for _, bad := range []string{"web:data", "deploy/web", "deploy/web:", "widget/web:data", "a/b/c/d:data", "deploy/we b:data"} {
		if _, _, _, err := parseVolume(bad); err == nil || !strings.Contains(err.Error(), "KIND/NAME:VOLUME") {
			t.Errorf("parseVolume(%q): %v, want a refusal with the accepted form", bad, err)
		}
	}
}

func TestMountCommand(t *testing.T) {
	ov := &openVolume{v: tunnel.Volume{Share: "volume", User: "plug", Password: "pw", ReadOnly: true}, port: 40001, dir: "./data"}
	mac, auto := mountCommand("darwin", ov, false)
	if !auto || strings.Join(mac, " ") != "mount_smbfs -N //plug:pw@127.0.0.1:40001/volume ./data" {
		t.Errorf("macOS: %q, %v", mac, auto)
	}
	win, auto := mountCommand("windows", ov, false)
	if auto || strings.Join(win, " ") != `net use \\127.0.0.1\volume /TCPPORT:40001 /USER:plug pw` {
		t.Errorf("Windows: %q, %v", win, auto)
	}
	linux, auto := mountCommand("linux", ov, false)
	if auto || linux[0] != "sudo" || !strings.Contains(strings.Join(linux, " "), "mount -t cifs //127.0.0.1/volume ./data -o port=40001,username=plug,password=pw,") || !strings.HasSuffix(linux[len(linux)-1], ",ro") {
		t.Errorf("Linux, not root: %q, %v", linux, auto)
	}
	if linux, auto := mountCommand("linux", ov, true); !auto || linux[0] != "mount" {
		t.Errorf("Linux as root: %q, %v", linux, auto)
	}
}
