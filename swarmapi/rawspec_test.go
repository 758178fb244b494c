package swarmapi

import (
	"encoding/json"
	"testing"
)

func TestRawSpecChangesOnlyWhatItIsTold(t *testing.T) {
	const orig = `{"Mode":{"Global":{}},"Name":"web","TaskTemplate":{"ContainerSpec":{"Image":"x"}}}`
	var spec RawSpec
	json.Unmarshal([]byte(orig), &spec)

	spec.Delete("Labels", "absent") // must not create Labels
	spec.Delete("TaskTemplate", "Placement", "Constraints")
	if b, _ := json.Marshal(spec); string(b) != orig {
		t.Fatalf("deleting what is absent changed the spec: %s", b)
	}
	if err := spec.Set(json.RawMessage(`["node.role==manager"]`), "TaskTemplate", "Placement", "Constraints"); err != nil {
		t.Fatal(err)
	}
	spec.SetLabel("k", "v")
	if got, ok := spec.Get("TaskTemplate", "Placement"); !ok || string(got) != `{"Constraints":["node.role==manager"]}` {
		t.Fatalf("Get: %s %v", got, ok)
	}
	if spec.Label("k") != "v" {
		t.Fatal("label not set")
	}
	if _, ok := spec.Get("Mode", "Replicated"); ok {
		t.Fatal("Get found what is absent")
	}
}
