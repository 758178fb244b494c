package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A path is one way between the laptop and the cluster. The consume side
// is measured by a client on the laptop calling the bench server pod; the
// serve side by a client in a pod calling the laptop's bench server.
type path struct {
	name  string // e.g. "consume/plug"
	addr  string // what the client dials
	where string // "laptop", "plug -c" or "pod"
}

// paths measures every path: throughput, latency, setup, concurrency.
//
//	raw            laptop → pod IP; pod → laptop IP: no tunnel
//	openssh        ssh -L / -R through an OpenSSH sshd on the node's address
//	               (beside the agent's NodePort): OpenSSH at both ends
//	openssh-agent  the same ssh -L / -R through the plug agent
//	plug           plug -c (the name benchsrv), plug -s (the name benchup)
func (d *driver) paths() error {
	procs, err := d.startPaths()
	defer func() {
		if err := stopAll(procs, 20*time.Second); err != nil {
			d.logf("stopping: %v", err)
		}
	}()
	if err != nil {
		return err
	}
	clusterPort := strconv.Itoa(serverPort)
	all := []path{
		{"consume/raw", d.serverIP + ":" + clusterPort, "laptop"},
		{"consume/openssh", "127.0.0.1:" + strconv.Itoa(sshLocalPort), "laptop"},
		{"consume/openssh-agent", "127.0.0.1:" + strconv.Itoa(sshAgentPort), "laptop"},
		{"consume/plug", "benchsrv:" + clusterPort, "plug -c"},
		{"serve/raw", d.laptopIP + ":" + strconv.Itoa(laptopPort), "pod"},
		{"serve/openssh", d.nodeIP + ":" + strconv.Itoa(sshNodePort), "pod"},
		{"serve/openssh-agent", "benchssh:" + clusterPort, "pod"},
		{"serve/plug", "benchup:" + clusterPort, "pod"},
	}
	for _, p := range all {
		d.logf("path %s", p.name)
		if err := d.measurePath(p); err != nil {
			d.fail(p.name, err)
		}
	}
	return nil
}

// startPaths starts what the tunnelled paths need and waits until each
// carries a connection.
func (d *driver) startPaths() ([]*background, error) {
	var procs []*background
	add := func(name string, cmd *exec.Cmd) error {
		b, err := d.start(name, cmd)
		if err != nil {
			return err
		}
		procs = append(procs, b)
		return nil
	}
	ssh := func(port int, user string, forwards ...string) *exec.Cmd {
		args := []string{"ssh", "-N", "-i", d.sshKey, "-p", strconv.Itoa(port),
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR", "-o", "ServerAliveInterval=15"}
		return d.laptop(append(append(args, forwards...), user)...)
	}
	lp := strconv.Itoa(laptopPort)
	if err := add("laptop-server", d.laptopTool("serve", ":"+lp)); err != nil {
		return procs, err
	}
	if err := add("ssh-sshd", ssh(d.sshdPort, "root@"+d.nodeIP,
		"-L", fmt.Sprintf("127.0.0.1:%d:%s:%d", sshLocalPort, d.serverClusterIP, serverPort),
		"-R", fmt.Sprintf("%s:%d:127.0.0.1:%s", d.nodeIP, sshNodePort, lp))); err != nil {
		return procs, err
	}
	if err := add("ssh-agent", ssh(d.agentPort, "bench@"+d.nodeIP,
		"-L", fmt.Sprintf("127.0.0.1:%d:benchsrv:%d", sshAgentPort, serverPort),
		"-R", fmt.Sprintf("benchssh:%d:127.0.0.1:%s", serverPort, lp))); err != nil {
		return procs, err
	}
	if err := add("plug-serve", d.laptop(d.plug, "-p", "bench", "-s", fmt.Sprintf("benchup:%d:%s", serverPort, lp), "--", d.tool, "idle")); err != nil {
		return procs, err
	}
	checks := []struct {
		from func(...string) *exec.Cmd
		addr string
	}{
		{d.laptopTool, "127.0.0.1:" + lp},
		{d.laptopTool, fmt.Sprintf("127.0.0.1:%d", sshLocalPort)},
		{d.laptopTool, fmt.Sprintf("127.0.0.1:%d", sshAgentPort)},
		{d.pod, d.laptopIP + ":" + lp},
		{d.pod, fmt.Sprintf("%s:%d", d.nodeIP, sshNodePort)},
		{d.pod, fmt.Sprintf("benchssh:%d", serverPort)},
		{d.pod, fmt.Sprintf("benchup:%d", serverPort)},
	}
	for _, c := range checks {
		if err := eventually(60*time.Second, c.addr+" answers", func() error {
			for _, p := range procs {
				if p.exited() {
					return fmt.Errorf("%s ended (see %s-%s.log)", p.name, d.profile, p.name)
				}
			}
			return d.answers(c.from, c.addr)
		}); err != nil {
			return procs, err
		}
	}
	return procs, nil
}

// measurePath runs the suite on one path and writes its rows. Throughput
// is named by the direction the data flows: l2p_mbps from the laptop to
// the pod, p2l_mbps back.
func (d *driver) measurePath(p path) error {
	args := []string{"suite", "-addr", p.addr, "-bytes", strconv.FormatInt(d.bytes, 10),
		"-rr", strconv.Itoa(d.rr), "-connects", strconv.Itoa(d.connects), "-concurrent", strconv.Itoa(d.concurrent)}
	var cmd *exec.Cmd
	switch p.where {
	case "laptop":
		cmd = d.laptopTool(args...)
	case "plug -c":
		cmd = d.laptop(append([]string{d.plug, "-p", "bench", "-c", "--", d.tool}, args...)...)
	default:
		cmd = d.pod(args...)
	}
	out, err := output(cmd)
	if err != nil {
		return err
	}
	up, down := "l2p_mbps", "p2l_mbps"
	if p.where == "pod" {
		up, down = down, up
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		metric, value, ok := strings.Cut(line, ",")
		if !ok {
			continue
		}
		switch metric {
		case "up_mbps":
			metric = up
		case "down_mbps":
			metric = down
		}
		d.row(p.name, metric, value)
	}
	return nil
}
