package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// The bench protocol. A client opens a connection and sends one command
// byte; what follows depends on it:
//
//	'U' n(8)  then n bytes      the server reads them all, then answers 'K'
//	'D' n(8)                    the server sends n bytes, then closes
//	'E' size(4)                 echo: each size bytes the client sends come back
//	'P'                         the server answers 'K' at once, then waits for EOF
//
// Lengths are big-endian. Every path under test (raw TCP, ssh -L/-R, plug)
// carries the same bytes, so the same client measures them all.
const (
	cmdUpload   = 'U'
	cmdDownload = 'D'
	cmdEcho     = 'E'
	cmdPing     = 'P'
	answerOK    = 'K'
)

// bulkBuffer is the size of the reads and writes of bulk transfers.
const bulkBuffer = 256 << 10

// maxEcho bounds the message size of an echo connection.
const maxEcho = 1 << 20

// serve answers the bench protocol on every address given, and echoes
// every UDP datagram to the same address back to its sender, until
// signalled.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("give at least one address to listen on, e.g. :9000")
	}
	errs := make(chan error, 2*fs.NArg())
	for _, addr := range fs.Args() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		go func() { errs <- acceptLoop(l) }()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		go func() { errs <- echoLoop(pc.(*net.UDPConn)) }()
	}
	log.Printf("serving the bench protocol and a UDP echo on %v", fs.Args())
	return untilSignal(errs)
}

// echoLoop sends every datagram pc receives back to its sender, or its
// acknowledgment where the datagram asks for one: the answers to what one
// read takes together (a run, udpbatch.go) in one write. The datagrams of
// a run come from one sender, which asks for acknowledgments of all of
// them or of none (benchtool udp): the first says which.
func echoLoop(pc *net.UDPConn) error {
	bigBuffers(pc)
	takeRuns(pc)
	buf, oob := make([]byte, 1<<16), make([]byte, syscall.CmsgSpace(4))
	acks := make([]byte, 0, 1<<16)
	for {
		n, oobn, _, from, err := pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return err
		}
		size := runSize(oob[:oobn])
		if size == 0 {
			size = n
		}
		if !asksAcknowledgment(buf[:min(size, n)]) {
			writeRun(pc, buf[:n], size, from)
			continue
		}
		acks = acks[:0]
		for b := buf[:n]; len(b) > 0; b = b[min(size, len(b)):] {
			acks = append(acks, b[:min(udpAckSize, len(b))]...)
		}
		writeRun(pc, acks, udpAckSize, from)
	}
}

func acceptLoop(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go func() {
			defer c.Close()
			if err := answer(c); err != nil && !errors.Is(err, io.EOF) {
				log.Printf("%s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// answer serves one connection.
func answer(c net.Conn) error {
	var cmd [1]byte
	if _, err := io.ReadFull(c, cmd[:]); err != nil {
		return err
	}
	switch cmd[0] {
	case cmdUpload:
		n, err := readLength(c, 8)
		if err != nil {
			return err
		}
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, int64(n)), make([]byte, bulkBuffer)); err != nil {
			return err
		}
		_, err = c.Write([]byte{answerOK})
		return err
	case cmdDownload:
		n, err := readLength(c, 8)
		if err != nil {
			return err
		}
		return sendZeros(c, int64(n))
	case cmdEcho:
		size, err := readLength(c, 4)
		if err != nil {
			return err
		}
		if size == 0 || size > maxEcho {
			return errors.New("echo size out of range")
		}
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return err
			}
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
	case cmdPing:
		if _, err := c.Write([]byte{answerOK}); err != nil {
			return err
		}
		_, err := io.Copy(io.Discard, c)
		return err
	}
	return errors.New("unknown command byte")
}

func readLength(r io.Reader, size int) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[8-size:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// header is a command byte followed by a big-endian length of size bytes.
func header(cmd byte, n uint64, size int) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return append([]byte{cmd}, b[8-size:]...)
}

// sendZeros writes n zero bytes to w.
func sendZeros(w io.Writer, n int64) error {
	buf := make([]byte, bulkBuffer)
	for n > 0 {
		chunk := buf
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		m, err := w.Write(chunk)
		n -= int64(m)
		if err != nil {
			return err
		}
	}
	return nil
}

// idle waits for a signal: the process of a pod that tests exec into.
func idle(args []string) error { return untilSignal(nil) }

// untilSignal waits for SIGINT or SIGTERM and returns nil, or for an error
// from errs, which it returns.
func untilSignal(errs <-chan error) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errs:
		return err
	case <-sig:
		return nil
	}
}
