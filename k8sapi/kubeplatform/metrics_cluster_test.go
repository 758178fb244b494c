package kubeplatform

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// Acceptance 6, on the real cluster: with PLUG_METRICS_ADDR set in the
// manifest, curl of the agent pod's metrics during a run shows the run and
// the name it serves.
func TestMetricsOfTheDeployedAgentShowTheRun(t *testing.T) {
	k := needKube(t)
	image := agentImage(t, k.Kube)
	curl, err := exec.LookPath("curl")
	if err != nil {
		clustertest.Unavailable(t, "curl is not installed: apt-get install curl")
	}
	k.deployWeb(t, 1)
	a := deployAgent(t, k, image, clustertest.ManifestEnv("PLUG_METRICS_ADDR", `":9090"`))
	s := a.connect(t)
	a.serveWeb(t, s)
	_, ip := a.newestPod()
	out, err := exec.Command(curl, "-sS", "--max-time", "10", fmt.Sprintf("http://%s:9090/metrics", ip)).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	for _, want := range []string{
		`plug_runs_open{kind="serves"} 1`,
		`plug_name{name="web",port="80",protocol="tcp",mode="parked",run="`,
		`plug_run{run="`,
		`plug_build_info{version="`,
		"# TYPE plug_api_errors_total counter",
		`plug_sweep_actions_total{action="give_back"}`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the metrics lack %s:\n%s", want, out)
		}
	}
}
