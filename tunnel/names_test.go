package tunnel_test

import (
	"strings"
	"testing"

	"plug/tunnel"
)

func TestCheckName(t *testing.T) {
	for _, good := range []string{"web", "a", "my-service", "s3", strings.Repeat("a", 63)} {
		if err := tunnel.CheckName(good); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
	for _, bad := range []string{"", "localhost", "Web", "1web", "web-", "my_service", "web.ns", strings.Repeat("a", 64)} {
		err := tunnel.CheckName(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if !strings.Contains(err.Error(), "e.g. my-service") {
			t.Errorf("%q: the error shows no example: %v", bad, err)
		}
	}
}

func TestCheckPort(t *testing.T) {
	for _, port := range []int{0, -1, 65536} {
		if tunnel.CheckPort(port) == nil {
			t.Errorf("port %d accepted", port)
		}
	}
	if err := tunnel.CheckPort(65535); err != nil {
		t.Error(err)
	}
}
