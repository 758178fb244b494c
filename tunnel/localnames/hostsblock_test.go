package localnames

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestHostsBlock(t *testing.T) {
	machine := "127.0.0.1\tlocalhost\r\n10.0.0.5\tprinter\r\n"
	lines := []HostLine{{netip.MustParseAddr("127.77.0.1"), []string{"web", "web.shop"}}}
	with := withBlock([]byte(machine), 42, lines)
	want := "# >>> plug run, process 42: cluster names, removed when the run ends\r\n" +
		"127.77.0.1\tweb web.shop\r\n" +
		"# <<< plug run, process 42\r\n" + machine
	if string(with) != want {
		t.Fatalf("with the block:\n%q\nwant\n%q", with, want)
	}
	again := withBlock(with, 42, []HostLine{{netip.MustParseAddr("127.77.0.2"), []string{"api"}}})
	if string(again) != "# >>> plug run, process 42: cluster names, removed when the run ends\r\n127.77.0.2\tapi\r\n# <<< plug run, process 42\r\n"+machine {
		t.Fatalf("the block was not replaced:\n%q", again)
	}
	other := withBlock(again, 7, lines)
	if back := withBlock(withBlock(other, 42, nil), 7, nil); string(back) != machine {
		t.Fatalf("removing both blocks left:\n%q", back)
	}
	// A crashed run's block, cut short, is removed by the next run.
	crashed := "# >>> plug run, process 9: cluster names, removed when the run ends\n127.77.0.3\tdb\n"
	cleaned, gone := withoutBlocks([]byte("::1 localhost\n"+crashed), func(pid int) bool { return pid != 9 })
	if string(cleaned) != "::1 localhost\n" || !reflect.DeepEqual(gone, []int{9}) {
		t.Fatalf("cleaned %q, gone %v", cleaned, gone)
	}
}
