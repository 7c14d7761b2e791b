package oauth_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the server starts must end with it: the fetch cache's
// first version ran one per server that nothing stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
