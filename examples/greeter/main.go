// Command greeter is a complete expert agent in thirty lines: one tool,
// greet, served on the bus under the agent's MQTT username. Run it with
// GREETER_BROKER_URL, GREETER_USERNAME and GREETER_PASSWORD set; it logs
// to standard error (why it cannot connect, say).
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

func main() {
	agent := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: os.Getenv("GREETER_BROKER_URL"),
		Username:  os.Getenv("GREETER_USERNAME"), // the agent's name on the bus
		Password:  os.Getenv("GREETER_PASSWORD"),
	})
	err := agent.AddTool(expertagent.Tool{
		Tool: mcp.Tool{Name: "greet", Description: "Greets someone by name.",
			InputSchema: []byte(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
			// Changes nothing: read-only tokens may call it too.
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: mcp.Bool(true)}},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var args struct{ Name string } // "name" as the schema spells it
			if err := req.Bind(&args); err != nil {
				return nil, err // an isError result the model can read: a wrong type, "name" missing
			}
			return mcp.TextResult("Hello, " + args.Name + "!"), nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
