package main

import (
	"encoding/binary"
	"net"
)

// serveNXDomain answers every DNS query on UDP addr (127.0.0.1:53: the
// nameserver of the bench's runs, startSeen) that no such name exists,
// until the returned stop, so that a run's lookups of a name the cluster does not
// have yet end at once on this machine, one query each, rather than going
// to the machine's nameservers or being retried as a failure.
func serveNXDomain(addr string) (stop func(), err error) {
	at, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp4", at)
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n < 12 || buf[2]&0x80 != 0 { // shorter than a header, or an answer
				continue
			}
			buf[2] = 0x80 | buf[2]&0x79               // an answer to the query, its opcode and RD kept
			buf[3] = 0x80 | 3                         // recursion available, NXDOMAIN
			binary.BigEndian.PutUint32(buf[6:10], 0)  // no answers, no authority
			binary.BigEndian.PutUint16(buf[10:12], 0) // no additional records (the query's EDNS left out)
			c.WriteToUDPAddrPort(buf[:questionEnd(buf[:n])], from)
		}
	}()
	return func() { c.Close() }, nil
}

// questionEnd is where the first question of query msg ends (the header's
// end if it has none or it is malformed).
func questionEnd(msg []byte) int {
	if binary.BigEndian.Uint16(msg[4:6]) == 0 {
		return 12
	}
	i := 12
	for i < len(msg) && msg[i] != 0 {
		i += 1 + int(msg[i])
	}
	if i+5 > len(msg) {
		binary.BigEndian.PutUint16(msg[4:6], 0)
		return 12
	}
	binary.BigEndian.PutUint16(msg[4:6], 1) // that question alone
	return i + 5
}
