package cli

import (
	"os"

	"plug/tunnel/cli/lifeline"
	"plug/tunnel/localnames"
)

// The test binary stands for plug where a run starts plug itself: as the
// names helper and as the guardian of the run's command, which main.go
// dispatches in plug. With PLUG_TEST_PLUG=1 it is plug itself, for tests
// that need plug as a process of its own.
func init() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case localnames.HelperArg:
			os.Exit(localnames.Helper(os.Args[2:]))
		case lifeline.HelperArg:
			os.Exit(lifeline.Guard(os.Args[2:]))
		}
	}
	if os.Getenv("PLUG_TEST_PLUG") == "1" {
		os.Exit(Main(os.Args[1:]))
	}
}
