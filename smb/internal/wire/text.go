package wire

import (
	"encoding/binary"
	"errors"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrBadString is returned for UTF-16 that is not whole code units or
// holds an unpaired surrogate.
var ErrBadString = errors.New("invalid UTF-16 string")

// DecodeUTF16 decodes UTF-16LE bytes.
func DecodeUTF16(b []byte) (string, error) {
	if len(b)%2 != 0 {
		return "", ErrBadString
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	for i := 0; i < len(u); i++ {
		switch {
		case u[i] < 0xD800 || u[i] > 0xDFFF:
		case u[i] < 0xDC00 && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] <= 0xDFFF:
			i++
		default:
			return "", ErrBadString
		}
	}
	return string(utf16.Decode(u)), nil
}

// AppendUTF16 appends s encoded as UTF-16LE to b.
func AppendUTF16(b []byte, s string) []byte {
	for _, r := range s {
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			b = binary.LittleEndian.AppendUint16(b, uint16(r1))
			b = binary.LittleEndian.AppendUint16(b, uint16(r2))
			continue
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(r))
	}
	return b
}

// UTF16Len is the length in bytes of s encoded as UTF-16LE.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 4
		} else {
			n += 2
		}
	}
	return n
}

// filetimeEpoch is 1970-01-01 in FILETIME: 100 ns intervals since 1601.
const filetimeEpoch = 116444736000000000

// Filetime is t as a FILETIME; the zero time is 0.
func Filetime(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return UnixFiletime(t.Unix(), int64(t.Nanosecond()))
}

// FiletimeUnix is a FILETIME as seconds and nanoseconds since 1970 (the
// nanoseconds in [0, 1e9), the seconds negative before 1970), for any
// FILETIME below 2^63.
func FiletimeUnix(ft uint64) (sec, nsec int64) {
	d := int64(ft) - filetimeEpoch
	sec, rest := d/10_000_000, d%10_000_000
	if rest < 0 {
		sec, rest = sec-1, rest+10_000_000
	}
	return sec, rest * 100
}

// UnixFiletime is seconds and nanoseconds since 1970 as a FILETIME.
func UnixFiletime(sec, nsec int64) uint64 {
	return uint64(sec*10_000_000 + nsec/100 + filetimeEpoch)
}
