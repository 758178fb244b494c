package cli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The programs a developer runs resolve names in their own ways: libc
// (curl, getent, Python, Node, the JVM) and Go's own resolver. clientsScript
// fetches a URL with each of them; the test binary itself is the Go
// program, with GODEBUG=netdns=go.

func init() {
	if url := os.Getenv("PLUG_TEST_HTTP_GET"); url != "" {
		os.Exit(httpGet(url))
	}
}

// httpGet prints the body at url; Go's resolver looks the name up.
func httpGet(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(string(b))
	return 0
}

// clientsScript is a shell script that fetches http://HOST:PORT/ with every
// client, for each host, printing "CLIENT HOST BODY" lines, and "getent
// HOST ADDR" for each host. self is the test binary as CMD's user may run
// it, dir a directory that user may read.
func clientsScript(t *testing.T, self, dir string, port int, hosts ...string) string {
	t.Helper()
	java := filepath.Join(dir, "Get.java")
	if err := os.WriteFile(java, []byte(`public class Get {
	public static void main(String[] a) throws Exception {
		var c = (java.net.HttpURLConnection) new java.net.URL(a[0]).openConnection();
		c.setConnectTimeout(5000);
		System.out.print(new String(c.getInputStream().readAllBytes()));
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	clients := map[string]string{
		"curl":   `curl -sS --max-time 5 "$url"`,
		"go":     `env -u PLUG_TEST_PLUG GODEBUG=netdns=go PLUG_TEST_HTTP_GET="$url" ` + self,
		"python": `/usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")' "$url"`,
		"node":   `node -e 'require("http").get(process.argv[1], r => r.pipe(process.stdout)).on("error", e => { console.error(e.message); process.exit(1) })' "$url"`,
	}
	if _, err := exec.LookPath("java"); err == nil {
		clients["java"] = "java -Djava.net.preferIPv4Stack=true " + java + ` "$url"`
	}
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "url=http://%s:%d/\n", h, port)
		for name, cmd := range clients {
			fmt.Fprintf(&b, "printf '%s %s %%s\\n' \"$(%s 2>&1 | tr '\\n' ' ')\"\n", name, h, cmd)
		}
		fmt.Fprintf(&b, "printf 'getent %s %%s\\n' \"$(getent hosts %s | cut -f1 -d' ')\"\n", h, h)
	}
	return b.String()
}

// clientNames are the clients clientsScript runs.
func clientNames() []string {
	names := []string{"curl", "go", "python", "node"}
	if _, err := exec.LookPath("java"); err == nil {
		names = append(names, "java")
	}
	return names
}

// checkClients checks that every client reached want at every host.
func checkClients(t *testing.T, stdout, want string, hosts ...string) {
	t.Helper()
	for _, h := range hosts {
		for _, c := range clientNames() {
			prefix := c + " " + h + " "
			line := lineWith(stdout, prefix)
			if !strings.Contains(line, want) {
				t.Errorf("%s did not reach %s: %q", c, h, line)
			}
		}
		if line := lineWith(stdout, "getent "+h+" "); !strings.HasPrefix(line, "getent "+h+" 127.") {
			t.Errorf("getent does not resolve %s to a loopback address: %q", h, line)
		}
	}
}

func lineWith(text, prefix string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
