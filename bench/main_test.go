package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// childEnv makes the test binary act as a child baseline server (the
// baseline name is its last argument), so the child-process mode is tested
// with the real exec path.
const childEnv = "TOOLBUS_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := ServeChild(ctx, os.Args[len(os.Args)-1], os.Stdin, os.Stdout, ServerOptions{})
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
