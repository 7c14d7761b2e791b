package h1_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a Server starts (connections, watches, the fallback's)
// is gone once its tests have shut it down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
