package main

import "encoding/binary"

// tcp4Segments returns how many wire packets of gsoSize payload bytes an
// IPv4 TCP packet stands for, and false if it is not one.
func tcp4Segments(ip []byte, gsoSize int) (int, bool) {
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 6 || gsoSize <= 0 {
		return 0, false
	}
	ihl := int(ip[0]&0x0f) * 4
	if len(ip) < ihl+20 {
		return 0, false
	}
	thl := int(ip[ihl+12]>>4) * 4
	payload := len(ip) - ihl - thl
	if payload < 0 {
		return 0, false
	}
	return (payload + gsoSize - 1) / gsoSize, true
}

// segment cuts an IPv4 TCP burst into its wire packets of gsoSize payload
// bytes, as the kernel's segmentation would, and returns those whose keep is
// true, each after a virtio-net header that asks for nothing: the IP and
// TCP checksums are computed here.
func segment(ip []byte, gsoSize int, keep []bool) [][]byte {
	ihl := int(ip[0]&0x0f) * 4
	thl := int(ip[ihl+12]>>4) * 4
	hdr := ihl + thl
	payload := ip[hdr:]
	id := binary.BigEndian.Uint16(ip[4:])
	seq := binary.BigEndian.Uint32(ip[ihl+4:])
	flags := ip[ihl+13]
	var out [][]byte
	for i, k := range keep {
		if !k {
			continue
		}
		start := i * gsoSize
		end := min(start+gsoSize, len(payload))
		seg := make([]byte, vnetHdrLen+hdr+end-start)
		pkt := seg[vnetHdrLen:]
		copy(pkt, ip[:hdr])
		copy(pkt[hdr:], payload[start:end])
		binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		binary.BigEndian.PutUint16(pkt[4:], id+uint16(i))
		binary.BigEndian.PutUint16(pkt[10:], 0)
		binary.BigEndian.PutUint16(pkt[10:], ^checksum(pkt[:ihl], 0))
		tcp := pkt[ihl:]
		binary.BigEndian.PutUint32(tcp[4:], seq+uint32(start))
		f := flags
		if i != len(keep)-1 {
			f &^= 0x01 | 0x08 // FIN and PSH only on the last
		}
		if i != 0 {
			f &^= 0x80 // CWR only on the first
		}
		tcp[13] = f
		binary.BigEndian.PutUint16(tcp[16:], 0)
		var pseudo [12]byte
		copy(pseudo[:8], pkt[12:20])
		pseudo[9] = 6
		binary.BigEndian.PutUint16(pseudo[10:], uint16(len(tcp)))
		binary.BigEndian.PutUint16(tcp[16:], ^checksum(tcp, checksum(pseudo[:], 0)))
		out = append(out, seg)
	}
	return out
}

// checksum adds b to the ones' complement sum sum (RFC 1071), folded.
func checksum(b []byte, sum uint16) uint16 {
	s := uint32(sum)
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
