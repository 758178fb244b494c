package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func TestControlMessagesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := &controlConn{rw: nopCloser{&buf}}
	sent := []message{
		helloMsg{Run: "r-1", Version: "v1.2.3", Kind: kindServes, OS: "linux", Arch: "amd64"},
		welcomeMsg{Version: "v1", Agent: "plug-0", Platform: "kubernetes", Resumed: true},
		servedMsg{Name: "web", Port: 80, TookOver: true, Detail: "parked"},
		eventMsg{Name: "web", Kind: "warning", Text: "not reachable inside the cluster"},
		endedMsg{By: "admin", Reason: "maintenance"},
		goodbyeMsg{},
	}
	for _, m := range sent {
		if err := c.send(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range sent {
		typ, frame, err := c.receive()
		if err != nil {
			t.Fatal(err)
		}
		if typ != want.controlType() {
			t.Fatalf("type %q, want %q", typ, want.controlType())
		}
		got, err := decodeAny(typ, frame)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %#v, want %#v", got, want)
		}
	}
}

func TestControlRefusesBadFrames(t *testing.T) {
	big := binary.BigEndian.AppendUint32(nil, maxControlFrame+1)
	if _, err := readFrame(bytes.NewReader(big)); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("oversized frame: %v", err)
	}
	for _, frame := range []string{`[]`, `{}`, `{"type":""}`, `not json`} {
		if _, err := decodeType([]byte(frame)); err == nil {
			t.Errorf("decodeType(%s) accepted it", frame)
		}
	}
	for _, frame := range []string{
		`{"type":"hello","run":"","kind":"serves"}`,
		`{"type":"hello","run":"a b","kind":"serves"}`,
		`{"type":"hello","run":"r","kind":"both"}`,
		`{"type":"hello","run":"r","kind":"serves","container":"\u001b[2Jlxc"}`,
	} {
		if _, err := decodeMsg[helloMsg]([]byte(frame)); err == nil {
			t.Errorf("decodeMsg[helloMsg](%s) accepted it", frame)
		}
	}
	if _, err := decodeMsg[servedMsg]([]byte(`{"name":"Web","port":80}`)); err == nil {
		t.Error("decodeMsg[servedMsg] accepted an invalid name")
	}
	if _, err := decodeMsg[servedMsg]([]byte(`{"name":"web","port":0}`)); err == nil {
		t.Error("decodeMsg[servedMsg] accepted port 0")
	}
}

// Texts may span lines (a remedy to copy), but hold no other control
// character, which is shown escaped; short fields hold none at all.
func TestControlTextsCannotDriveTheTerminal(t *testing.T) {
	m, err := decodeMsg[eventMsg]([]byte(`{"kind":"warn\ning","text":"a\u001b[2Jb\r\nc"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Text != `a\x1b[2Jb\r`+"\n"+`c` || m.Kind != `warn\ning` {
		t.Errorf("control characters kept: %q, %q", m.Text, m.Kind)
	}
}

// decodeAny decodes a frame of any known type, for the tests.
func decodeAny(typ string, frame []byte) (message, error) {
	switch typ {
	case typeHello:
		return decodeMsg[helloMsg](frame)
	case typeWelcome:
		return decodeMsg[welcomeMsg](frame)
	case typeServed:
		return decodeMsg[servedMsg](frame)
	case typeEvent:
		return decodeMsg[eventMsg](frame)
	case typeEnded:
		return decodeMsg[endedMsg](frame)
	case typeGoodbye:
		return decodeMsg[goodbyeMsg](frame)
	}
	return nil, errors.New("unknown type " + typ)
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// fuzzDecoder checks that decode never panics on garbage and that what it
// accepts survives a round trip unchanged.
func fuzzDecoder[M message](f *testing.F, decode func([]byte) (M, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decode(data)
		if err != nil {
			return
		}
		frame, err := encodeFrame(m)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", data, err)
		}
		again, err := decode(frame[4:])
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip of %q: %#v, %v; want %#v", data, again, err, m)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x0f{\"type\":\"hello\"}"))
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := readFrame(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(frame) > maxControlFrame {
			t.Fatalf("frame of %d bytes accepted", len(frame))
		}
		decodeType(frame)
	})
}

func FuzzDecodeHello(f *testing.F) {
	fuzzDecoder(f, decodeMsg[helloMsg], `{"type":"hello","run":"r1","version":"v1","kind":"serves","os":"linux","arch":"amd64"}`, `{"run":"x","kind":"consumes"}`)
}

func FuzzDecodeWelcome(f *testing.F) {
	fuzzDecoder(f, decodeMsg[welcomeMsg], `{"type":"welcome","version":"v1","agent":"a","platform":"k8s","resumed":true}`)
}

func FuzzDecodeServed(f *testing.F) {
	fuzzDecoder(f, decodeMsg[servedMsg], `{"type":"served","name":"web","port":80,"took_over":true,"detail":"d"}`)
}

func FuzzDecodeEvent(f *testing.F) {
	fuzzDecoder(f, decodeMsg[eventMsg], `{"type":"event","name":"web","kind":"warning","text":"t"}`, `{"kind":"refused","text":"\u0007"}`)
}

func FuzzDecodeEnded(f *testing.F) {
	fuzzDecoder(f, decodeMsg[endedMsg], `{"type":"ended","by":"agent","reason":"r","retry":true}`)
}

func FuzzDecodeGoodbye(f *testing.F) {
	fuzzDecoder(f, decodeMsg[goodbyeMsg], `{"type":"goodbye"}`)
}
