package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"plug/tunnel/clustertest"
)

// Every command and every topic is in exactly one group of plug help, and
// plug help NAME shows it.
func TestHelpListsEveryCommandAndTopic(t *testing.T) {
	newHome(t)
	in := map[string]int{}
	for _, g := range groups {
		for _, n := range g.names {
			in[n]++
		}
	}
	_, overviewText, _ := plug(t, "help")
	for _, c := range commands {
		if in[c.name] != 1 {
			t.Errorf("command %s is in %d groups of plug help, want 1", c.name, in[c.name])
		}
		delete(in, c.name)
	}
	for _, tp := range topics {
		if in[tp.name] != 1 {
			t.Errorf("topic %s is in %d groups of plug help, want 1", tp.name, in[tp.name])
		}
		delete(in, tp.name)
		if !strings.Contains(overviewText, "  help "+tp.name+" ") {
			t.Errorf("plug help does not list the topic %s:\n%s", tp.name, overviewText)
		}
		code, stdout, stderr := plug(t, "help", tp.name)
		text, _ := topicText(tp.name)
		if code != 0 || stdout != text || stderr != "" || len(text) < 200 {
			t.Errorf("plug help %s: exit %d, %d bytes, stderr %q", tp.name, code, len(stdout), stderr)
		}
	}
	for n := range in {
		t.Errorf("plug help's groups name %q, which is no command and no topic", n)
	}
	entries, err := topicFiles.ReadDir("topics")
	if err != nil || len(entries) != len(topics) {
		t.Errorf("topics/ holds %d files, the topic table %d (%v)", len(entries), len(topics), err)
	}
	if code, _, stderr := plug(t, "help", "nosuch"); code != ExitUsage || !strings.Contains(stderr, `no command or topic "nosuch"`) {
		t.Errorf("plug help nosuch: exit %d, %s", code, stderr)
	}
}

// helpTexts is every text plug's help shows: the overview, each command's
// usage and each topic, by how it is asked for.
func helpTexts(t *testing.T) map[string]string {
	texts := map[string]string{}
	asks := [][]string{{"help"}}
	for _, c := range commands {
		asks = append(asks, []string{"help", c.name})
	}
	for _, tp := range topics {
		asks = append(asks, []string{"help", tp.name})
	}
	for _, a := range asks {
		code, stdout, stderr := plug(t, a...)
		if code != 0 {
			t.Fatalf("plug %s: exit %d, %s", strings.Join(a, " "), code, stderr)
		}
		texts["plug "+strings.Join(a, " ")] = stdout
	}
	return texts
}

// No line of plug's help is wider than 80 columns, and every command's
// usage has examples.
func TestHelpFitsIn80ColumnsAndShowsExamples(t *testing.T) {
	newHome(t)
	for ask, text := range helpTexts(t) {
		for i, line := range strings.Split(text, "\n") {
			if n := utf8.RuneCountInString(line); n > 80 {
				t.Errorf("%s, line %d, is %d columns wide:\n%s", ask, i+1, n, line)
			}
			if strings.Contains(line, "\t") {
				t.Errorf("%s, line %d, has a tab, whose width depends on the terminal", ask, i+1)
			}
		}
	}
	for _, c := range commands {
		if !strings.Contains(c.usage, "\nExample") {
			t.Errorf("plug help %s shows no examples", c.name)
		}
	}
}

// plug help --man is a man page that holds every command and every topic,
// and that groff reads without a warning.
func TestManPageHoldsEverything(t *testing.T) {
	newHome(t)
	code, page, stderr := plug(t, "help", "--man")
	if code != 0 || !strings.HasPrefix(page, ".TH PLUG 1 ") {
		t.Fatalf("plug help --man: exit %d, %s\n%.200s", code, stderr, page)
	}
	for _, c := range commands {
		if !strings.Contains(page, "\n.SS plug "+c.name+"\n") {
			t.Errorf("the man page has no section for plug %s", c.name)
		}
	}
	for _, tp := range topics {
		if !strings.Contains(page, "\n.SS "+tp.name+"\n") {
			t.Errorf("the man page has no section for the topic %s", tp.name)
		}
	}
	if code, _, _ := plug(t, "help", "--man", "run"); code != ExitUsage {
		t.Errorf("plug help --man run: exit %d, want %d", code, ExitUsage)
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		clustertest.Unavailable(t, "groff is not installed (Debian: apt-get install groff-base): the man page cannot be rendered")
	}
	render := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	render.Stdin = strings.NewReader(page)
	if out, err := render.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff reads the man page with: %v\n%s", err, out)
	}
	render = exec.Command(groff, "-man", "-Tutf8")
	render.Stdin = strings.NewReader(page)
	out, err := render.Output()
	if err != nil || !strings.Contains(string(out), "plug -p PROFILE -s web:8080:3000 -- npm start") ||
		!strings.Contains(string(out), `\\127.0.0.1\volume`) {
		t.Errorf("the rendered man page lacks the overview's example or a backslash: %v", err)
	}
}

// The completion scripts are valid in their shells, and bash's completes
// commands, topics, flags and profiles.
func TestCompletionScripts(t *testing.T) {
	h := newHome(t)
	h.profile("shop", false)
	scripts := map[string]string{}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, stdout, stderr := plug(t, "completion", shell)
		if code != 0 || len(stdout) < 500 {
			t.Fatalf("plug completion %s: exit %d, %s", shell, code, stderr)
		}
		scripts[shell] = stdout
	}
	if code, _, stderr := plug(t, "completion", "tcsh"); code != ExitUsage || !strings.Contains(stderr, `not "tcsh"`) {
		t.Errorf("plug completion tcsh: exit %d, %s", code, stderr)
	}
	dir := t.TempDir()
	check := map[string][]string{"bash": {"-n"}, "zsh": {"-n"}, "fish": {"--no-execute"}}
	for shell, flags := range check {
		path, err := exec.LookPath(shell)
		if err != nil {
			clustertest.Unavailable(t, shell+" is not installed (Debian: apt-get install "+shell+"): its completion script cannot be checked")
			continue
		}
		file := filepath.Join(dir, "plug."+shell)
		if err := os.WriteFile(file, []byte(scripts[shell]), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path, append(flags, file)...).CombinedOutput(); err != nil {
			t.Errorf("%s %s rejects plug completion %s: %v\n%s", shell, strings.Join(flags, " "), shell, err, out)
		}
	}
	t.Log("PowerShell is not packaged by Debian: its script is checked by its words only")
	for _, w := range []string{"Register-ArgumentCompleter", "'keygen'", "'troubleshooting'", "'--env-from'"} {
		if !strings.Contains(scripts["powershell"], w) {
			t.Errorf("plug completion powershell lacks %s", w)
		}
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		return
	}
	file := filepath.Join(dir, "plug.bash")
	for line, want := range map[string]string{
		"plug k":            "keygen",
		"plug help tr":      "troubleshooting",
		"plug help ke":      "keygen",
		"plug -p sh":        "shop",
		"plug keygen -p s":  "shop",
		"plug keygen --f":   "--force",
		"plug --env-f":      "--env-file --env-from",
		"plug completion z": "zsh",
		"plug update --a":   "--agent",
	} {
		words := strings.Fields(line)
		script := fmt.Sprintf("source %s\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_plug\necho \"${COMPREPLY[*]}\"\n",
			file, strings.Join(words, " "), len(words)-1)
		cmd := exec.Command(bash, "-c", script)
		cmd.Env = append(os.Environ(), "PLUG_HOME="+os.Getenv("PLUG_HOME"))
		out, err := cmd.Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("bash completes %q to %q (%v), want %q", line, got, err, want)
		}
	}
}
