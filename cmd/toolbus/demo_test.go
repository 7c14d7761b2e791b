package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module's root, where the Makefile is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// needTools skips a test that needs programs this host lacks.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("needs %s: %v", n, err)
		}
	}
}

// freeAddr is a loopback address with a port the OS had free.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// `make run` says what it builds and lets go build -v name each package it
// compiles: the first build takes a minute or more, and silence looks hung.
// A stand-in for go prints a package only when asked for -v, then fails, so
// that the demo never starts.
func TestMakeRunShowsBuildProgress(t *testing.T) {
	needTools(t, "make")
	fakeGo := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\ncase \" $* \" in *\" -v \"*) echo example.com/compiled/pkg >&2 ;; esac\nexit 1\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "make", "-s", "-C", repoRoot(t), "run", "GO="+fakeGo, "BIN="+t.TempDir())
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make run with a failing build succeeded:\n%s", out)
	}
	for _, want := range []string{"make run: building", "a minute or more", "example.com/compiled/pkg"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make run printed no %q:\n%s", want, out)
		}
	}
}

// Ctrl-C on `make run` (SIGINT to the terminal's whole foreground process
// group) stops the agents first, then the server, and says nothing about
// it beyond their own stop lines: no warning (an agent losing its broker),
// no make "*** Interrupt". Before that, while it runs, the banner names the
// console and the demo user signs in to it (checkDemoConsole). The real
// make, script and binaries, on a temporary data dir and free loopback
// ports.
func TestMakeRunCtrlCStopsAgentsFirst(t *testing.T) {
	needTools(t, "make", "bash", "curl")
	isolateEnv(t)
	cmd := exec.Command("make", "-s", "-C", repoRoot(t), "run", "BIN="+t.TempDir())
	httpAddr := freeAddr(t)
	cmd.Env = append(os.Environ(), "TOOLBUS_DATA_DIR="+t.TempDir(), "TOOLBUS_HTTP_ADDR="+httpAddr, "TOOLBUS_MQTT_ADDR="+freeAddr(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group of its own
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
			// Reaped: its pid, and so the group's ID, may be another
			// process's by now (pid_max is small here), which a signal to
			// -pgid would hit.
			return
		default:
		}
		// The script stops the gateway and agents (process groups of
		// their own) on SIGTERM; SIGKILL would leave them running.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	// Up: the banner and both agents serving (the first build may take minutes).
	var before []string
	deadline := time.After(5 * time.Minute)
	for serving := 0; serving < 2 || !slices.Contains(before, "Press Ctrl-C to stop."); {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("make run ended before the demo was up:\n%s", strings.Join(before, "\n"))
			}
			before = append(before, l)
			if strings.Contains(l, `msg="expert agent serving"`) {
				serving++
			}
		case <-deadline:
			t.Fatalf("the demo was not up in 5 minutes:\n%s", strings.Join(before, "\n"))
		}
	}

	checkDemoConsole(t, httpAddr, before)

	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var after []string
	deadline = time.After(time.Minute)
	for open := true; open; {
		select {
		case l, ok := <-lines:
			if open = ok; ok {
				after = append(after, l)
			}
		case <-deadline:
			t.Fatalf("make run did not end a minute after Ctrl-C:\n%s", strings.Join(after, "\n"))
		}
	}
	err = <-done
	done <- err // for the cleanup
	// make ends by the SIGINT it got, as after any Ctrl-C; the script exits 0.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 0) {
		t.Errorf("make run ended with %v", err)
	}

	text := strings.Join(after, "\n")
	stopped, down := -1, -1
	for i, l := range after {
		switch {
		case strings.Contains(l, `msg="expert agent stopped"`):
			stopped = i
		case strings.Contains(l, `msg="shutting down"`) && down < 0:
			down = i
		}
	}
	if n := strings.Count(text, `msg="expert agent stopped"`); n != 2 || down < 0 || stopped > down {
		t.Errorf("want both agents stopped (%d) before the server shuts down (line %d of %d):\n%s", n, down, stopped, text)
	}
	if noisy := regexp.MustCompile(`(?m)^.*(level=(warning|error|fatal|panic)|Interrupt|Terminated|Killed).*$`).FindAllString(text, -1); len(noisy) > 0 {
		t.Errorf("Ctrl-C printed:\n%s\n\nall of it:\n%s", strings.Join(noisy, "\n"), text)
	}
}

// checkDemoConsole: the banner of `make run` names the console's URL and
// the demo user's sign-in; the URL answers with the sign-in form, and the
// demo user, an admin, signs in with that password and gets the overview.
func checkDemoConsole(t *testing.T, httpAddr string, banner []string) {
	t.Helper()
	consoleURL := "http://" + httpAddr + "/console/"
	re := regexp.MustCompile(`^\s*Console: (\S+)\s+\(sign in: user demo, password (\S+)\)$`)
	var password string
	for _, l := range banner {
		if m := re.FindStringSubmatch(l); m != nil {
			if m[1] != consoleURL {
				t.Errorf("the banner names the console %s, want %s", m[1], consoleURL)
			}
			password = m[2]
		}
	}
	if password == "" {
		t.Fatalf("the banner names no console URL and sign-in:\n%s", strings.Join(banner, "\n"))
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Without a session every console page is the sign-in form (401).
	if code, body := get(consoleURL); code != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
		t.Errorf("GET %s without a session: %d\n%s", consoleURL, code, body)
	}
	if code, body := get(consoleURL + "sign-in"); code != http.StatusOK || !strings.Contains(body, `name="password"`) {
		t.Errorf("GET %ssign-in: %d\n%s", consoleURL, code, body)
	}
	req, err := http.NewRequest(http.MethodPost, consoleURL+"sign-in",
		strings.NewReader(url.Values{"username": {"demo"}, "password": {password}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+httpAddr) // a browser's same-origin form
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("sign in as demo: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.String() != consoleURL || !strings.Contains(string(b), `id="agents-online"`) {
		t.Errorf("the demo user's sign-in ends on %s with %d:\n%s", resp.Request.URL, resp.StatusCode, b)
	}
}
