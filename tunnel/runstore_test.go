package tunnel

import (
	"errors"
	"slices"
	"testing"
)

func TestWrittenRecordsKeepsWhatWasAddedAndNotRemoved(t *testing.T) {
	var w WrittenRecords
	if got := w.Names(); len(got) != 0 {
		t.Fatalf("an empty set names %v", got)
	}
	w.Add("a")
	w.Add("b")
	w.Add("a")
	w.Remove("b")
	w.Remove("never-added")
	if got := w.Names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Names() = %v, want [a]", got)
	}
}

func TestMarkEndedMarksTheLiveRecordsOfTheRunAndCountsThem(t *testing.T) {
	type obj struct {
		run  string
		live bool
		fail bool
	}
	objs := []obj{{"r1", true, false}, {"r1", false, false}, {"r2", true, false}, {"r1", true, true}, {"r1", true, false}}
	var tried []obj
	live := func(o obj) (RunRecord, bool) { return RunRecord{Run: o.run}, o.live }
	n, err := MarkEnded(objs, "r1", live, func(o obj) error {
		tried = append(tried, o)
		if o.fail {
			return errors.New("refused")
		}
		return nil
	})
	if want := []obj{objs[0], objs[3], objs[4]}; !slices.Equal(tried, want) {
		t.Errorf("MarkEnded tried to mark %v, want the live records of r1 %v", tried, want)
	}
	if n != 2 {
		t.Errorf("MarkEnded counted %d marked, want 2", n)
	}
	if err == nil || err.Error() != "refused" {
		t.Errorf("MarkEnded's error = %v, want the one refusal", err)
	}
}
