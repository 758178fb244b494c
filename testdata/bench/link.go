package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// link is a wide-area link between two TUN devices it creates, A and B:
// each packet read from one is written to the other after -delay, unless
// it is lost (-loss percent of packets, in each direction on its own).
// It is the benchmark's netem, for a kernel built without sch_netem:
// run.sh moves B into the laptop's namespace and gives both devices their
// addresses. The devices go away with the process. It prints "ready" once
// both exist.
//
// The devices take TCP segmentation offload, so the kernel hands over
// 64 KiB bursts rather than each 1500-byte packet (one system call each
// way would cap the link near 600 Mbit/s on a small machine). Loss still
// applies to each packet of the wire: a burst that loses one is cut into
// its packets (segment.go) and the rest go on.
func link(args []string) error {
	fs := flag.NewFlagSet("link", flag.ExitOnError)
	a := fs.String("a", "", "name of the first TUN device")
	b := fs.String("b", "", "name of the second TUN device")
	delay := fs.Duration("delay", 10*time.Millisecond, "one-way delay")
	loss := fs.Float64("loss", 0.1, "percent of packets lost in each direction")
	fs.Parse(args)
	if *a == "" || *b == "" {
		return errors.New("give -a and -b, the names of the two devices")
	}
	fa, err := openTUN(*a)
	if err != nil {
		return err
	}
	fb, err := openTUN(*b)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	errs := make(chan error, 4)
	for _, dir := range []struct{ from, to int }{{fa, fb}, {fb, fa}} {
		l := &delayLine{to: dir.to, delay: *delay, loss: *loss / 100, ready: make(chan struct{}, 1)}
		go func() { errs <- l.receive(dir.from) }()
		go func() { errs <- l.send() }()
	}
	return untilSignal(errs)
}

// TUN constants of linux/if_tun.h absent from package syscall.
const (
	tunSetOffload = 0x400454d0 // TUNSETOFFLOAD
	tunFCsum      = 0x01
	tunFTSO4      = 0x02
	iffVnetHdr    = 0x4000
)

// openTUN creates a TUN device that takes checksum and IPv4 segmentation
// offload, with a virtio-net header before each packet, and returns its file
// descriptor in blocking mode (each direction has threads of its own).
func openTUN(name string) (int, error) {
	if len(name) > 15 {
		return -1, fmt.Errorf("device name %q is longer than 15 bytes", name)
	}
	fd, err := syscall.Open("/dev/net/tun", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	var req [40]byte // struct ifreq: the name, then the flags
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[16])) = syscall.IFF_TUN | syscall.IFF_NO_PI | iffVnetHdr
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		syscall.Close(fd)
		return -1, fmt.Errorf("creating TUN device %s: %w", name, e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), tunSetOffload, tunFCsum|tunFTSO4); e != 0 {
		syscall.Close(fd)
		return -1, fmt.Errorf("offloads of TUN device %s: %w", name, e)
	}
	return fd, nil
}

// delayLine is one direction of the link: packets wait in order until
// their time has come.
type delayLine struct {
	to    int
	delay time.Duration
	loss  float64

	mu    sync.Mutex
	queue []packet
	ready chan struct{} // a packet was queued
}

type packet struct {
	due  time.Time
	data []byte // a virtio-net header and the packet
}

func (l *delayLine) receive(from int) error {
	buf := make([]byte, vnetHdrLen+65536)
	for {
		n, err := syscall.Read(from, buf)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return fmt.Errorf("reading a packet: %w", err)
		}
		kept := survivors(buf[:n], l.lost)
		if len(kept) == 0 {
			continue
		}
		due := time.Now().Add(l.delay)
		l.mu.Lock()
		for _, p := range kept {
			l.queue = append(l.queue, packet{due: due, data: p})
		}
		l.mu.Unlock()
		select {
		case l.ready <- struct{}{}:
		default:
		}
	}
}

func (l *delayLine) lost() bool { return rand.Float64() < l.loss }

func (l *delayLine) send() error {
	var due []packet
	for {
		// Swap the queue with the batch sent last time: the receiver
		// appends to one while this sends the other.
		l.mu.Lock()
		due, l.queue = l.queue, due[:0]
		l.mu.Unlock()
		if len(due) == 0 {
			<-l.ready
			continue
		}
		for i, p := range due {
			if wait := time.Until(p.due); wait > 0 {
				time.Sleep(wait)
			}
			// A failed write (a device going down) loses the packet, as
			// a router would.
			syscall.Write(l.to, p.data)
			due[i] = packet{}
		}
	}
}

// vnetHdrLen is the size of struct virtio_net_hdr.
const vnetHdrLen = 10

// survivors returns what goes on of a packet read from a TUN device (a
// virtio-net header and an IP packet), each a copy: nothing if it is lost,
// the packet whole if none of its wire packets is lost, else those of its
// wire packets that are not.
func survivors(p []byte, lost func() bool) [][]byte {
	if len(p) < vnetHdrLen {
		return nil
	}
	gsoType, gsoSize := p[1]&^0x80, int(binary.LittleEndian.Uint16(p[4:]))
	segs, ok := tcp4Segments(p[vnetHdrLen:], gsoSize)
	if gsoType != 1 || !ok || segs <= 1 { // not a TCP/IPv4 burst
		if lost() {
			return nil
		}
		return [][]byte{clone(p)}
	}
	keep := make([]bool, segs)
	kept := 0
	for i := range keep {
		keep[i] = !lost()
		if keep[i] {
			kept++
		}
	}
	switch kept {
	case 0:
		return nil
	case segs:
		return [][]byte{clone(p)}
	}
	return segment(p[vnetHdrLen:], gsoSize, keep)
}

func clone(p []byte) []byte { return append([]byte(nil), p...) }
