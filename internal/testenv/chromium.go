package testenv

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/debpkg"
)

// chromiumInstallTimeout bounds apt-get install chromium on a fresh
// machine: the browser and its libraries are a few hundred megabytes.
const chromiumInstallTimeout = 10 * time.Minute

// chromium is the headless browser of the sign-in tests, found or
// installed once per test binary.
var chromium = &debpkg.Program{Package: "chromium", Look: lookChromium, Timeout: chromiumInstallTimeout}

func lookChromium() string {
	// The binary itself: Debian's /usr/bin/chromium is a wrapper script
	// that reads /etc/chromium.d and adds flags of its own.
	for _, p := range []string{"/usr/lib/chromium/chromium"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser starts a headless Chromium (Debian's package, installed as
// MosquittoBinary installs Mosquitto) and returns a chromedp context for
// one tab. The browser ends with the test, or after d.
func Browser(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	bin := chromium.Need(t)
	ctx := Context(t, d)
	// Chromium now and then dies while it starts on a loaded machine
	// (its crash handler, before any page): that is not what a test
	// tests, so a start is tried up to three times, each with a profile
	// of its own.
	var err error
	for range browserStarts {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(bin),
			chromedp.UserDataDir(t.TempDir()),
			// Tests run as root in CI, where Chromium's sandbox cannot start.
			chromedp.NoSandbox,
			chromedp.Flag("disable-dev-shm-usage", true),
		)
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		bctx, cancelTab := chromedp.NewContext(actx)
		if err = chromedp.Do(bctx); err == nil { // starts the browser
			t.Cleanup(func() {
				cancelTab()
				cancelAlloc() // waits for the browser process to exit
			})
			return bctx
		}
		cancelTab()
		cancelAlloc()
		if ctx.Err() != nil {
			break
		}
		t.Logf("chromium did not start (%v); trying again", err)
	}
	t.Fatalf("start chromium (%s): %v", bin, err)
	return nil
}

// browserStarts is how many times Browser tries to start Chromium.
const browserStarts = 3
