package wire

import (
	"testing"
	"time"
)

func TestFiletime(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(1601, 1, 1, 0, 0, 0, 100, time.UTC),
		time.Date(1968, 7, 1, 12, 0, 0, 123456700, time.UTC),
		time.Unix(0, 0),
		time.Date(2026, 12, 1, 0, 0, 0, 999999900, time.UTC),
		time.Unix(15032385535, 0), // past the end of int64 nanoseconds
	} {
		ft := Filetime(tm)
		sec, nsec := FiletimeUnix(ft)
		if back := time.Unix(sec, nsec).UTC(); !back.Equal(tm) {
			t.Errorf("%v: FILETIME %d came back as %v", tm, ft, back)
		}
	}
	if got := Filetime(time.Unix(0, 0)); got != 116444736000000000 {
		t.Errorf("1970 is FILETIME %d", got)
	}
}
