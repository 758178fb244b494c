package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// A UDP Service reached by name: the test binary, run by CMD with
// PLUG_TEST_UDP_PROBE=NAME:PORT, is the unprivileged program that sends
// the datagrams.

func init() {
	if addr := os.Getenv("PLUG_TEST_UDP_PROBE"); addr != "" {
		line, err := udpProbe(func() (net.Conn, error) { return net.Dial("udp", addr) })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(line)
		os.Exit(0)
	}
}

const (
	probeDatagrams = 10000 // in all, over probeSockets sockets
	probeSockets   = 2
	probeMaxSize   = 1400
)

// udpProbe sends probeDatagrams datagrams of 1 to probeMaxSize bytes from
// probeSockets sockets made by dial, at once, each waiting for the echo of
// one before it sends the next, and says what came back:
// "sent N matched M lost L mismatched X late Y p50 D in T". A reply is matched
// when it is the datagram its socket sent last; every datagram carries its
// socket's mark, so a reply on the wrong socket is a mismatch.
func udpProbe(dial func() (net.Conn, error)) (string, error) {
	type result struct {
		matched, lost, mismatched, late int
		rtts                            []time.Duration
	}
	results := make([]result, probeSockets)
	start := time.Now()
	var wg sync.WaitGroup
	for s := range probeSockets {
		c, err := dial()
		if err != nil {
			return "", err
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[s]
			lost := map[string]bool{}
			buf := make([]byte, 65536)
			for i := range probeDatagrams / probeSockets {
				msg := probeDatagram(s, i)
				start := time.Now()
				c.Write(msg)
				for {
					c.SetReadDeadline(start.Add(time.Second))
					n, err := c.Read(buf)
					if err != nil {
						r.lost++
						lost[string(msg)] = true
						break
					}
					if bytes.Equal(buf[:n], msg) {
						r.matched++
						r.rtts = append(r.rtts, time.Since(start))
						break
					}
					if lost[string(buf[:n])] {
						r.late++
						continue
					}
					r.mismatched++
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start).Round(time.Millisecond)
	var all result
	for _, r := range results {
		all.matched += r.matched
		all.lost += r.lost
		all.mismatched += r.mismatched
		all.late += r.late
		all.rtts = append(all.rtts, r.rtts...)
	}
	slices.Sort(all.rtts)
	p50 := time.Duration(0)
	if len(all.rtts) > 0 {
		p50 = all.rtts[len(all.rtts)/2]
	}
	return fmt.Sprintf("sent %d matched %d lost %d mismatched %d late %d p50 %s in %s", probeDatagrams, all.matched, all.lost, all.mismatched, all.late, p50, took), nil
}

// probeDatagram is the i-th datagram of socket s: its size runs over
// 1..probeMaxSize, its first byte marks the socket, and from the fifth on
// it carries i.
func probeDatagram(s, i int) []byte {
	size := 1 + (i*7919)%probeMaxSize
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*31 + j)
	}
	b[0] = byte('A' + s)
	if size >= 5 {
		b[1], b[2], b[3], b[4] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	}
	return b
}

// TestKubeUDPEchoByName: an unprivileged program sends 10,000 datagrams of
// 1 to 1,400 bytes to a UDP Service by name, from two sockets at once;
// every reply comes back to the socket that sent the request, matched, and
// the loss is reported (and stays under 1%).
func TestKubeUDPEchoByName(t *testing.T) {
	k := needKubeRun(t)
	k.Apply(t, udpEchoManifest(k.WorkloadImage))
	k.Kubectl(t, "wait", "pod/echo", "--for=condition=Ready", "--timeout=90s")
	clustertest.Eventually(t, 30*time.Second, "kube-proxy handles echo:5353/udp", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := k.dial(ctx, "udp", "echo:5353")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		c.Write([]byte("ping"))
		buf := make([]byte, 16)
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
			return errors.New("no echo yet")
		}
		return nil
	})
	code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", "env", "-u", "PLUG_TEST_PLUG", "PLUG_TEST_UDP_PROBE=echo:5353", k.bin)
	t.Logf("exit %d\n%s%s", code, stdout, stderr)
	line := lineWith(stdout, "sent ")
	var sent, matched, lost, mismatched, late int
	var p50, took string
	if _, err := fmt.Sscanf(line, "sent %d matched %d lost %d mismatched %d late %d p50 %s in %s", &sent, &matched, &lost, &mismatched, &late, &p50, &took); err != nil || code != 0 {
		t.Fatalf("the probe did not report (exit %d): %v", code, err)
	}
	t.Logf("UDP by name through plug: %d datagrams, %d matched, %d lost (%.2f%%), p50 round trip %s, all in %s", sent, matched, lost, 100*float64(lost)/float64(sent), p50, took)
	direct, err := udpProbe(func() (net.Conn, error) { return k.dial(context.Background(), "udp", "echo:5353") })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("straight to the Service's cluster IP from this machine, for comparison: %s", direct)
	if mismatched != 0 || matched+lost != sent || lost*100 > sent {
		t.Fatalf("%s: want every reply matched and under 1%% lost", strings.TrimSpace(line))
	}
}

// TestKubeServeUDPTakesOverTheUDPPortAndCtrlCRestoresIt: -s
// stats:8125:PORT/udp with a local UDP listener, where the deployed
// Service stats has TCP and UDP on port 8125: a pod's nc -u-style sender
// reaches the listener and gets its replies, the TCP port goes on reaching
// the deployed pod meanwhile, and Ctrl-C restores the Service's spec and
// annotations byte for byte.
func TestKubeServeUDPTakesOverTheUDPPortAndCtrlCRestoresIt(t *testing.T) {
	k := needKubeRun(t)
	k.Apply(t, fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: stats}
spec:
  replicas: 1
  selector: {matchLabels: {app: stats}}
  template:
    metadata: {labels: {app: stats}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: tcp, image: %[1]s, imagePullPolicy: Never, args: [serve, -name, deployed-tcp, ":8125"]}
      - {name: udp, image: %[1]s, imagePullPolicy: Never, args: [udpecho, ":8125"]}
---
apiVersion: v1
kind: Service
metadata: {name: stats, annotations: {owner: team-metrics}}
spec:
  selector: {app: stats}
  ports:
  - {name: tcp, port: 8125, targetPort: 8125, protocol: TCP}
  - {name: udp, port: 8125, targetPort: 8125, protocol: UDP}
`, k.WorkloadImage)+"---\n"+workloadPod("sender", k.WorkloadImage, "pause"))
	k.Kubectl(t, "rollout", "status", "deployment/stats", "--timeout=90s")
	k.Kubectl(t, "wait", "pod/sender", "--for=condition=Ready", "--timeout=90s")
	if _, err := k.TryKubectl("exec", "sender", "--", "/workload", "udpsend", "-timeout", "1s", "stats:8125", "probe"); err != nil && strings.Contains(err.Error(), "unknown command") {
		clustertest.Unavailable(t, "the workload image "+k.WorkloadImage+" has no udpsend; build testdata/workload's image again (images.sh) and import it")
	}
	clustertest.Eventually(t, 30*time.Second, "the deployed stats answers UDP from the pod", func() error {
		_, err := k.TryKubectl("exec", "sender", "--", "/workload", "udpsend", "-timeout", "1s", "stats:8125", "deployed")
		return err
	})
	spec := func() string {
		return k.Kubectl(t, "get", "service", "stats", "-o", "jsonpath={.spec}") + "\n" + k.Kubectl(t, "get", "service", "stats", "-o", "jsonpath={.metadata.annotations}")
	}
	before := spec()

	var mu sync.Mutex
	var heard []string
	port := localUDPEcho(t, "127.0.0.1:0", func(b []byte) []byte {
		mu.Lock()
		heard = append(heard, string(b))
		mu.Unlock()
		return append([]byte("laptop got "), b...)
	})
	run, exited, stderr := k.serveUDP(t, "stats:8125", port)
	var out string
	var err error
	clustertest.Eventually(t, 30*time.Second, "the pod's sender reaches the local listener", func() error {
		out, err = k.TryKubectl("exec", "sender", "--", "/workload", "udpsend", "-n", "20", "-timeout", "1s", "stats:8125", "hello")
		if err != nil || !strings.Contains(out, "laptop got hello 0") {
			return fmt.Errorf("%q, %v", out, err)
		}
		return nil
	})
	for i := range 20 {
		if !strings.Contains(out, fmt.Sprintf("laptop got hello %d\n", i)) {
			t.Errorf("the sender's reply %d is missing: %q", i, out)
		}
	}
	if tcp, err := k.TryKubectl("exec", "sender", "--", "/workload", "get", "http://stats:8125/"); err != nil || !strings.Contains(tcp, "deployed-tcp") {
		t.Errorf("stats:8125/tcp while the UDP port is served: %q, %v; want the deployed pod", tcp, err)
	}
	mu.Lock()
	t.Logf("the listener heard %d datagrams, the first %q", len(heard), heard[0])
	mu.Unlock()

	run.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("plug did not end on Ctrl-C:\n%s", stderr.String())
	}
	if after := spec(); after != before {
		t.Fatalf("after Ctrl-C the Service is not as it was:\nbefore %s\nafter  %s", before, after)
	}
	clustertest.Eventually(t, 30*time.Second, "the deployed stats answers UDP again", func() error {
		out, err := k.TryKubectl("exec", "sender", "--", "/workload", "udpsend", "-timeout", "1s", "stats:8125", "back")
		if err != nil || strings.TrimSpace(out) != "back 0" {
			return fmt.Errorf("%q, %v", out, err)
		}
		return nil
	})
	t.Logf("plug:\n%s", stderr.String())
}

// TestKubeUDPThroughputAndLatency is a short form of the benchmark's UDP
// part (testdata/bench, which has a laptop namespace and its link) on the
// node itself: testdata/workload's udpbench, round trips of 64 bytes and
// the throughput of 1,400-byte datagrams with 32 in flight, to a UDP echo,
// each way through plug and straight. Consume: this machine to
// the echo pod's address, and a run's program to echo:5353 by name. Serve:
// a pod to an echo on this machine's address, and to bench:7000 served by
// -s bench:7000:PORT/udp. Each path loses under 1 % of its datagrams.
func TestKubeUDPThroughputAndLatency(t *testing.T) {
	k := needKubeRun(t)
	k.Apply(t, udpEchoManifest(k.WorkloadImage)+"---\n"+workloadPod("sender", k.WorkloadImage, "pause"))
	k.Kubectl(t, "wait", "pod/echo", "pod/sender", "--for=condition=Ready", "--timeout=90s")
	if out, err := k.TryKubectl("exec", "sender", "--", "/workload", "udpbench", "-h"); strings.Contains(out+fmt.Sprint(err), "unknown command") {
		clustertest.Unavailable(t, "the workload image "+k.WorkloadImage+" has no udpbench; build testdata/workload's image again (images.sh) and import it")
	}
	bin := filepath.Join(k.base, "workload")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../../testdata/workload"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/workload: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)
	podIP := strings.TrimSpace(k.Kubectl(t, "get", "pod", "echo", "-o", "jsonpath={.status.podIP}"))

	// The echoes on this machine: one on the node's address, which pods
	// reach straight (bound to it, so that its replies come from it), and
	// one on loopback, which plug serves.
	same := func(b []byte) []byte { return b }
	rawPort, port := localUDPEcho(t, net.JoinHostPort(k.NodeIP, "0"), same), localUDPEcho(t, "127.0.0.1:0", same)
	k.serveUDP(t, "bench:7000", port)
	clustertest.Eventually(t, 30*time.Second, "plug serves bench:7000/udp and the pod reaches it", func() error {
		_, err := k.TryKubectl("exec", "sender", "--", "/workload", "udpsend", "-timeout", "1s", "bench:7000", "ready")
		return err
	})

	measure := func(path string, cmd func() (string, error)) {
		t.Helper()
		out, err := cmd()
		line := lineWith(out, "p50_us ")
		var p50, p99, mbps float64
		var sent, lost int
		if _, serr := fmt.Sscanf(line, "p50_us %g p99_us %g mbps %g sent %d lost %d", &p50, &p99, &mbps, &sent, &lost); err != nil || serr != nil {
			t.Fatalf("%s: %q, %v", path, out, err)
		}
		t.Logf("%-14s p50 %6.0f µs  p99 %6.0f µs  %7.1f Mbit/s  %d sent, %d lost (%.2f %%)", path, p50, p99, mbps, sent, lost, 100*float64(lost)/float64(sent))
		if lost*100 > sent {
			t.Errorf("%s lost %d of %d datagrams", path, lost, sent)
		}
	}
	measure("consume/raw", func() (string, error) {
		out, err := exec.Command(bin, "udpbench", podIP+":9053").Output()
		return string(out), err
	})
	measure("consume/plug", func() (string, error) {
		code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", bin, "udpbench", "echo:5353")
		if code != 0 {
			return stdout, fmt.Errorf("exit %d: %s", code, stderr)
		}
		return stdout, nil
	})
	measure("serve/raw", func() (string, error) {
		return k.TryKubectl("exec", "sender", "--", "/workload", "udpbench", net.JoinHostPort(k.NodeIP, strconv.Itoa(rawPort)))
	})
	measure("serve/plug", func() (string, error) {
		return k.TryKubectl("exec", "sender", "--", "/workload", "udpbench", "bench:7000")
	})
}

// localUDPEcho answers each datagram to addr, a UDP address of this
// machine, with what answer makes of it, until t ends; it returns the port.
func localUDPEcho(t *testing.T, addr string, answer func([]byte) []byte) int {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(answer(buf[:n]), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// serveUDP starts plug -p kube -s NAME:PORT:LOCAL/udp -- sleep 600 as the
// developer, for name ("NAME:PORT") and the local UDP port local, and waits
// until plug says it serves it; the run is interrupted (Ctrl-C) when t ends
// if it still runs, and plug's stderr logged if t failed.
func (k *kubeRun) serveUDP(t *testing.T, name string, local int) (run *exec.Cmd, exited <-chan struct{}, stderr *tunneltest.Buffer) {
	t.Helper()
	run = k.command("-p", "kube", "-s", fmt.Sprintf("%s:%d/udp", name, local), "--", "sleep", "600")
	stderr = new(tunneltest.Buffer)
	run.Stderr = stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		run.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		run.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			run.Process.Kill()
		}
		if t.Failed() {
			t.Logf("plug:\n%s", stderr.String())
		}
	})
	clustertest.Eventually(t, 30*time.Second, "plug serves "+name+"/udp", func() error {
		if !strings.Contains(stderr.String(), fmt.Sprintf("%s/udp → localhost:%d/udp", name, local)) {
			return fmt.Errorf("plug says:\n%s", stderr.String())
		}
		return nil
	})
	return run, done, stderr
}

// workloadPod is a Pod called name, labelled app: name, whose one container
// runs the workload image with args (a YAML flow sequence's items).
func workloadPod(name, image, args string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, labels: {app: %[1]s}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %[2]s, imagePullPolicy: Never, args: [%[3]s]}
`, name, image, args)
}

// udpEchoManifest is a pod echoing UDP on port 9053 and the Service
// echo:5353/udp in front of it.
func udpEchoManifest(image string) string {
	return workloadPod("echo", image, `udpecho, ":9053"`) + `---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports:
  - {name: dgram, port: 5353, targetPort: 9053, protocol: UDP}
`
}
