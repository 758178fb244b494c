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

func TestMarkEndedMarksTheLiveRecordsOfTheRunOfTheKeyAndCountsThem(t *testing.T) {
	type obj struct {
		run, key string
		live     bool
		fail     bool
	}
	objs := []obj{{"r1", "alice", true, false}, {"r1", "alice", false, false}, {"r2", "alice", true, false}, {"r1", "alice", true, true},
		{"r1", "alice", true, false}, {"r1", "bob", true, false}}
	var tried []obj
	live := func(o obj) (RunRecord, bool) { return RunRecord{Run: o.run, Key: o.key}, o.live }
	n, err := MarkEnded(objs, "r1", "alice", live, func(o obj) error {
		tried = append(tried, o)
		if o.fail {
			return errors.New("refused")
		}
		return nil
	})
	if want := []obj{objs[0], objs[3], objs[4]}; !slices.Equal(tried, want) {
		t.Errorf("MarkEnded tried to mark %v, want the live records of alice's r1 %v (not bob's of the same id)", tried, want)
	}
	if n != 2 {
		t.Errorf("MarkEnded counted %d marked, want 2", n)
	}
	if err == nil || err.Error() != "refused" {
		t.Errorf("MarkEnded's error = %v, want the one refusal", err)
	}
}
