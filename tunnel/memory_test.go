package tunnel_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// The test binary is also the helper processes of the tests that must not
// share a process with what they measure (TestMain): an agent measured
// alone, a flood that must not take the test's own CPU.
const (
	agentProcessEnv = "PLUG_TEST_AGENT_PROCESS" // runAgentProcess
	agentNamesEnv   = "PLUG_TEST_AGENT_NAMES"   // runAgentProcess: how many cluster names, and caps for 1,000 runs of one key
	floodProcessEnv = "PLUG_TEST_FLOOD"         // runFlood, of the address it names
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(agentProcessEnv) != "":
		runAgentProcess()
	case os.Getenv(floodProcessEnv) != "":
		runFlood(os.Getenv(floodProcessEnv))
	default:
		os.Exit(m.Run())
	}
}

// startHelper runs the test binary as a helper process with env added,
// stopped (its stdin closed) and waited for when the test ends; it returns
// the helper's first line of output and its process id.
func startHelper(t *testing.T, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the helper process said %q: %v", line, err)
	}
	return strings.TrimSuffix(line, "\n"), cmd.Process.Pid
}

// pipePlatform is the in-memory platform whose cluster names are reached
// through in-process pipes answered by an echo, so that an agent carries
// any number of connections without a file descriptor each. Each echo
// costs the agent's process a goroutine: what is measured is an upper
// bound of the agent's own cost.
type pipePlatform struct{ *tunneltest.Platform }

func (p pipePlatform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	mine, theirs := net.Pipe()
	go func() {
		defer theirs.Close()
		buf := make([]byte, 64)
		for {
			n, err := theirs.Read(buf)
			if err != nil {
				return
			}
			if _, err := theirs.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	return mine, nil
}

// runAgentProcess runs an agent with the default caps on pipePlatform, on
// 127.0.0.1; it writes its address and host key on stdout, and stops when
// stdin closes.
func runAgentProcess() {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(key)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	platform := pipePlatform{tunneltest.NewPlatform()}
	platform.SetNames(tunnel.ClusterName{Name: "echo", Ports: []int{80}})
	// The cap of connections through the agent for all keys is the
	// default's before it is lowered to the process's open files: these
	// connections hold none.
	a := &tunnel.Agent{Platform: platform, HostKey: signer, ID: "agent-0", Logf: func(string, ...any) {},
		Limits: tunnel.Limits{Channels: tunnel.DefaultLimits.Channels}}
	if n, _ := strconv.Atoi(os.Getenv(agentNamesEnv)); n > 0 {
		platform.SetNames(scaleNames(n)...)
		a.Limits.Runs, a.Limits.RunsPerKey, a.Limits.ConnsPerKey = 1000, 1000, 1000
	}
	tunnel.CapGarbage(300) // as plug agent does, with the GOGC below
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Printf("%s %s", l.Addr(), ssh.MarshalAuthorizedKey(signer.PublicKey())) // ends with a line feed
	a.Serve(ctx, l)
}

// startAgentProcess starts runAgentProcess in a child process with the
// garbage collector's settings of plug agent in a container whose memory
// limit is limitMiB (GOGC=300, and a soft limit at 90 % of it), with env
// added, stopped when the test ends; it returns the agent's address, host
// key and process id.
func startAgentProcess(t *testing.T, limitMiB int, env ...string) (string, ssh.PublicKey, int) {
	t.Helper()
	line, pid := startHelper(t, append([]string{agentProcessEnv + "=1", "GOGC=300", fmt.Sprintf("GOMEMLIMIT=%dMiB", limitMiB*9/10)}, env...)...)
	addr, authorized, ok := strings.Cut(line, " ")
	if !ok {
		t.Fatalf("the agent process said %q", line)
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorized))
	if err != nil {
		t.Fatal(err)
	}
	return addr, hostKey, pid
}

// residentKiB reads a process's VmRSS and VmHWM (its peak), in KiB.
func residentKiB(t *testing.T, pid int) (rss, peak int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) int {
		m := regexp.MustCompile(name + `:\s+(\d+) kB`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no %s in /proc/%d/status", name, pid)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	return field("VmRSS"), field("VmHWM")
}

// manifestMemoryLimitMiB is the agent's memory limit in deploy/plug-k8s.yaml.
func manifestMemoryLimitMiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("../deploy/plug-k8s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`limits:\s+memory:\s+(\d+)Mi`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/plug-k8s.yaml sets no memory limit in Mi for the agent")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// With 200 sessions, each of its own key, asking for 500 connections each
// through the agent (100,000), the agent takes as many as its cap for all
// keys before sizing (30000; the agent sizes it lower in a container of
// 1 GiB, see channelCost) and refuses the others naming that cap, and its
// resident memory stays under the limit deploy/plug-k8s.yaml sets. The
// agent runs in a process of its own, measured alone; the resident memory
// a connection costs is channelCost.
func TestTheAgentsMemoryFitsTheManifestsLimit(t *testing.T) {
	const sessions, channels = 200, 500
	limit := manifestMemoryLimitMiB(t)
	addr, hostKey, pid := startAgentProcess(t, limit)
	idle, _ := residentKiB(t, pid)
	var capped atomic.Int32
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	handshakes := make(chan struct{}, 8) // within one address's share of handshakes at once
	for range sessions {
		wg.Go(func() {
			_, priv, _ := ed25519.GenerateKey(rand.Reader)
			signer, _ := ssh.NewSignerFromKey(priv)
			handshakes <- struct{}{}
			s, err := tunnel.Connect(context.Background(), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
			<-handshakes
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { s.Close() })
			for range channels {
				c, err := s.Dial(context.Background(), "echo:80")
				if err != nil && strings.Contains(err.Error(), "cap of "+strconv.Itoa(tunnel.DefaultLimits.Channels)+" connections through the agent for all keys together") &&
					strings.Contains(err.Error(), "PLUG_MAX_CHANNELS") {
					capped.Add(1)
					continue
				}
				if err == nil {
					_, err = roundTrip(c, "ping")
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening %d sessions of %d connections: %v", sessions, channels, err)
	}
	rss, peak := residentKiB(t, pid)
	t.Logf("%d sessions × %d connections asked for in %s: %d held, %d refused at the cap; the agent's resident memory: %d MiB idle, %d MiB with them (%d KiB a connection), peak %d MiB; the manifest's limit %d MiB",
		sessions, channels, time.Since(start).Round(time.Second), len(held), capped.Load(), idle>>10, rss>>10, (rss-idle)/max(1, len(held)), peak>>10, limit)
	if want := min(sessions*channels, tunnel.DefaultLimits.Channels); len(held) != want || len(held)+int(capped.Load()) != sessions*channels {
		t.Errorf("%d connections held and %d refused at the cap, want %d held and the others refused", len(held), capped.Load(), want)
	}
	if peak>>10 >= limit {
		t.Errorf("the agent's peak resident memory, %d MiB, is not under the manifest's limit of %d MiB", peak>>10, limit)
	}
}
