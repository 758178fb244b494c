package localnames

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// query builds a DNS query for name (dot-separated) of qtype, with an
// EDNS OPT record when opt.
func query(id uint16, name string, qtype uint16, opt bool) []byte {
	msg := binary.BigEndian.AppendUint16(nil, id)
	ar := byte(0)
	if opt {
		ar = 1
	}
	msg = append(msg, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, ar) // RD
	for _, label := range bytes.Split([]byte(name), []byte(".")) {
		msg = append(msg, byte(len(label)))
		msg = append(msg, label...)
	}
	msg = append(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, qtype)
	msg = binary.BigEndian.AppendUint16(msg, classIN)
	if opt {
		msg = append(msg, 0, 0, typeOPT, 0x04, 0xD0, 0, 0, 0, 0, 0, 0) // 1232 bytes, no options
	}
	return msg
}

// TestParseQuery: a stub resolver's query is read, its name lowercased
// for the lookup, with or without EDNS.
func TestParseQuery(t *testing.T) {
	for _, opt := range []bool{false, true} {
		q, err := parseQuery(query(0xBEEF, "Web.Shop.svc.cluster.local", typeA, opt))
		if err != nil {
			t.Fatalf("opt %v: %v", opt, err)
		}
		if q.id != 0xBEEF || q.host != "web.shop.svc.cluster.local" || q.qtype != typeA || q.qclass != classIN || q.flags&flagRD == 0 {
			t.Errorf("opt %v: read %+v", opt, q)
		}
	}
	q, err := parseQuery(query(1, "a*b.example", typeA, false))
	if err != nil || q.host != "" {
		t.Errorf("a name that is not a host name: %+v, %v; want it read, with no host", q, err)
	}
}

// TestParseQueryRefusesMalformed: whatever is not one plain question is
// refused, and the refusal keeps the id.
func TestParseQueryRefusesMalformed(t *testing.T) {
	good := query(7, "web", typeA, false)
	withOpt := query(7, "web", typeA, true)
	edit := func(msg []byte, f func([]byte) []byte) []byte { return f(bytes.Clone(msg)) }
	cases := map[string][]byte{
		"short header":        good[:11],
		"a response":          edit(good, func(m []byte) []byte { m[2] |= 0x80; return m }),
		"two questions":       edit(good, func(m []byte) []byte { m[5] = 2; return m }),
		"an answer":           edit(good, func(m []byte) []byte { m[7] = 1; return m }),
		"an authority":        edit(good, func(m []byte) []byte { m[9] = 1; return m }),
		"two additionals":     edit(withOpt, func(m []byte) []byte { m[11] = 2; return m }),
		"a compressed name":   edit(good, func(m []byte) []byte { m[12] = 0xC0; return m }),
		"a name past the end": edit(good, func(m []byte) []byte { m[12] = 40; return m }),
		"no type":             good[:len(good)-3],
		"trailing bytes":      append(bytes.Clone(good), 0),
		"not OPT":             edit(withOpt, func(m []byte) []byte { m[len(m)-9] = 1; return m }),
		"OPT data too long":   edit(withOpt, func(m []byte) []byte { m[len(m)-1] = 5; return m }),
		"an update":           edit(good, func(m []byte) []byte { m[2] |= 5 << 3; return m }),
		"a long name":         query(7, string(bytes.Repeat([]byte("abcdefghi."), 26))+"x", typeA, false),
	}
	for what, msg := range cases {
		if _, err := parseQuery(msg); err == nil {
			t.Errorf("%s: read as a query", what)
		}
	}
	if r := refusal(cases["two questions"]); len(r) != dnsHeaderLen || r[0] != 0 || r[1] != 7 || r[3]&0xF != rcodeFormErr || r[2]&0x80 == 0 {
		t.Errorf("refusal % x: want a FORMERR response with id 7", r)
	}
	if r := refusal(cases["an update"]); len(r) != dnsHeaderLen || r[3]&0xF != rcodeNotImp {
		t.Errorf("refusal of an update % x: want NOTIMP", r)
	}
	if refusal(cases["a response"]) != nil || refusal(good[:5]) != nil {
		t.Error("a response, or a fragment, was answered")
	}
}

// TestAnswer: the answer carries the id, RD, the question as asked and one
// A record of the address, or none.
func TestAnswer(t *testing.T) {
	msg := query(42, "Web.Shop", typeA, true)
	q, err := parseQuery(msg)
	if err != nil {
		t.Fatal(err)
	}
	out := answer(q, 0, netip.MustParseAddr("127.64.1.2"))
	want := append(append([]byte{0, 42, 0x85, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, q.question...),
		0xC0, 12, 0, 1, 0, 1, 0, 0, 0, answerTTL, 0, 4, 127, 64, 1, 2)
	if !bytes.Equal(out, want) {
		t.Fatalf("answer\n% x\nwant\n% x", out, want)
	}
	if !isResponseTo(out, 42) || isResponseTo(out, 43) || isResponseTo(msg, 42) {
		t.Error("isResponseTo is wrong")
	}
	none := answer(q, rcodeServFail, netip.Addr{})
	if len(none) != dnsHeaderLen+len(q.question) || none[7] != 0 || none[3]&0xF != rcodeServFail {
		t.Errorf("answer without a record: % x", none)
	}
}

// FuzzParseQuery: no input makes the parser panic, and what it reads is
// what it would answer: a query it accepts gets an answer whose question
// reads back the same.
func FuzzParseQuery(f *testing.F) {
	f.Add(query(1, "web", typeA, false))
	f.Add(query(2, "web.shop.svc.cluster.local", 28, true))
	f.Add(query(3, "x_y-z.example", typeA, false))
	f.Fuzz(func(t *testing.T, msg []byte) {
		q, err := parseQuery(msg)
		if err != nil {
			if r := refusal(msg); r != nil && (len(r) != dnsHeaderLen || !isResponseTo(r, binary.BigEndian.Uint16(msg))) {
				t.Fatalf("refusal % x of % x", r, msg)
			}
			return
		}
		out := answer(q, 0, netip.MustParseAddr("127.64.0.1"))
		// The answer minus its record is a response to the same question.
		back := bytes.Clone(out[:dnsHeaderLen+len(q.question)])
		back[2] &^= 0x80 | 0x04 // a query again: no QR, no AA
		back[7] = 0
		back[3] = 0
		rq, err := parseQuery(back)
		if err != nil || rq.id != q.id || rq.host != q.host || rq.qtype != q.qtype || !bytes.Equal(rq.question, q.question) {
			t.Fatalf("the answer's question reads back as %+v, %v; want %+v", rq, err, q)
		}
	})
}
