package expertagent_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

// ExampleAgent writes an expert agent with one tool, shout, and serves it
// until SIGINT or SIGTERM. It needs a broker (and an identity made with
// `toolbus mqtt-user add --role expert-agent`), so it does not run as a test.
func ExampleAgent() {
	agent := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://127.0.0.1:1883",
		// The agent's name on the bus: every instance run with this identity
		// shares its requests, so run as many as you like.
		Username: "shouter",
		Password: os.Getenv("SHOUTER_PASSWORD"),
		Name:     "Shouter", // for people: presence and serverInfo
		Version:  "1.0.0",
		// nil would log to standard error at info level as well.
		Logger: logrus.NewEntry(logrus.New()).WithField("app", "shouter"),
	})
	err := agent.AddTool(expertagent.Tool{
		Tool: mcp.Tool{
			Name:        "shout",
			Title:       "Shout",
			Description: "Returns the text in upper case, repeated `times` times.",
			InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string"},` +
				`"times":{"type":"integer","minimum":1,"maximum":10}},"required":["text"]}`),
			// Read-only tokens call only tools annotated read-only.
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true), OpenWorldHint: mcp.Bool(false)},
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			args := struct {
				Text  string `json:"text"`
				Times int    `json:"times"`
			}{Times: 1}
			if err := req.Bind(&args); err != nil {
				return nil, err // the model sees "invalid arguments: ..." as an isError result
			}
			if args.Times < 1 || args.Times > 10 {
				return mcp.ErrorResult("times must be between 1 and 10, got %d", args.Times), nil
			}
			var parts []string
			for i := range args.Times {
				select {
				case <-ctx.Done(): // the caller cancelled, or the gateway's deadline passed
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				// A no-op unless the caller asked for progress.
				_ = req.Progress(ctx, float64(i+1), float64(args.Times), "")
				parts = append(parts, strings.ToUpper(args.Text))
			}
			return mcp.TextResult(strings.Join(parts, " ")), nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-agent.Ready():
			fmt.Println("serving as", agent.ClientID())
		case <-ctx.Done():
		}
	}()
	// Run returns nil once ctx ends and in-flight calls are answered.
	if err := agent.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
