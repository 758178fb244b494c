package wire

import (
	"bytes"
	"testing"
)

func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		out := make([]byte, HeaderSize)
		h.Put(out)
		if back, err := ParseHeader(out); err != nil || back != h {
			t.Fatalf("header %+v came back as %+v, %v", h, back, err)
		}
	})
}

func FuzzParseTransform(f *testing.F) {
	f.Add(append(TransformID[:], make([]byte, 60)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ParseTransform(b)
		if err != nil {
			return
		}
		out := make([]byte, TransformSize)
		tr.Put(out)
		if back, err := ParseTransform(out); err != nil || back != tr {
			t.Fatalf("transform %+v came back as %+v, %v", tr, back, err)
		}
	})
}

func FuzzDecodeUTF16(f *testing.F) {
	f.Add([]byte("h\x00i\x00"))
	f.Add([]byte("\x3d\xd8\x00\xde"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeUTF16(b)
		if err != nil {
			return
		}
		if back := AppendUTF16(nil, s); !bytes.Equal(back, b) || UTF16Len(s) != len(b) {
			t.Fatalf("%x decoded to %q, which encodes as %x", b, s, back)
		}
	})
}
