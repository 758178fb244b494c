package ui

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// browser is a headless Chromium spoken to over the DevTools protocol on
// a pipe: messages are JSON objects ended by a NUL byte, written to its
// fd 3 and read from its fd 4.
type browser struct {
	t   *testing.T
	cmd *exec.Cmd
	w   io.Writer

	mu      sync.Mutex
	next    int
	waiting map[int]chan reply
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts headless Chromium; it is stopped when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		clustertest.Unavailable(t, "no chromium: run testdata/ui/deps.sh (as root) to install Debian's")
	}
	toChrome, ourEnd, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChrome, chromeEnd, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--hide-scrollbars", "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, chromeEnd}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChrome.Close()
	chromeEnd.Close()
	b := &browser{t: t, cmd: cmd, w: ourEnd, waiting: map[int]chan reply{}}
	go b.read(fromChrome)
	t.Cleanup(func() {
		ourEnd.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return b
}

// read hands each reply to the call waiting for it; events are dropped.
func (b *browser) read(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m struct {
			ID int `json:"id"`
			reply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
}

// call sends method with params to the session (the browser when "")
// and decodes its result into out, if not nil.
func (b *browser) call(session, method string, params any, out any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan reply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, _ := json.Marshal(msg)
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer from chromium in 30 s", method)
	}
}

// tab is one page of the browser.
type tab struct {
	b       *browser
	session string
}

// open opens url in a new tab of width × height CSS pixels at scale
// (2 for a page zoomed to 200 %), in dark mode or not.
func (b *browser) open(url string, width, height int, scale float64, dark bool) *tab {
	b.t.Helper()
	var target struct{ TargetID string }
	if err := b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		b.t.Fatal(err)
	}
	var att struct{ SessionID string }
	if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		b.t.Fatal(err)
	}
	tb := &tab{b: b, session: att.SessionID}
	scheme := "light"
	if dark {
		scheme = "dark"
	}
	tb.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": scale, "mobile": false})
	tb.do("Emulation.setEmulatedMedia", map[string]any{"features": []map[string]string{{"name": "prefers-color-scheme", "value": scheme}}})
	tb.do("Page.navigate", map[string]any{"url": url})
	return tb
}

func (tb *tab) do(method string, params any) {
	tb.b.t.Helper()
	if err := tb.b.call(tb.session, method, params, nil); err != nil {
		tb.b.t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its value into out.
func (tb *tab) eval(expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := tb.b.call(tb.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("%s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// must is eval that fails the test on an error.
func (tb *tab) must(expr string, out any) {
	tb.b.t.Helper()
	if err := tb.eval(expr, out); err != nil {
		tb.b.t.Fatal(err)
	}
}

// key presses a key (as dispatched by the keyboard) on the focused element.
func (tb *tab) key(key, code string, keyCode int) {
	tb.b.t.Helper()
	for _, typ := range []string{"keyDown", "keyUp"} {
		p := map[string]any{"type": typ, "key": key, "code": code, "windowsVirtualKeyCode": keyCode}
		if typ == "keyDown" && key == "Enter" {
			p["text"] = "\r"
		}
		tb.do("Input.dispatchKeyEvent", p)
	}
}

// typeText types text into the focused element.
func (tb *tab) typeText(text string) {
	tb.b.t.Helper()
	tb.do("Input.insertText", map[string]any{"text": text})
}

// screenshot writes the whole page as a PNG to path.
func (tb *tab) screenshot(path string) {
	tb.b.t.Helper()
	tb.do("Page.bringToFront", nil) // a tab in the background is not painted
	var m struct {
		CSSContentSize struct{ Width, Height float64 } `json:"cssContentSize"`
	}
	if err := tb.b.call(tb.session, "Page.getLayoutMetrics", nil, &m); err != nil {
		tb.b.t.Fatal(err)
	}
	clip := map[string]any{"x": 0, "y": 0, "width": m.CSSContentSize.Width, "height": m.CSSContentSize.Height, "scale": 1}
	var r struct{ Data string }
	if err := tb.b.call(tb.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true, "clip": clip}, &r); err != nil {
		tb.b.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err == nil && len(png) < 8 {
		err = errors.New("not a PNG")
	}
	if err != nil {
		tb.b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.b.t.Fatal(err)
	}
	tb.b.t.Logf("wrote %s (%d bytes)", path, len(png))
}
