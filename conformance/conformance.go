package conformance

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/logutil"
)

// Defaults of Options.
const (
	// DefaultStateTTL is how long a requestState stays valid: long enough
	// for a person to answer an elicitation, short enough that a leaked
	// state is soon useless.
	DefaultStateTTL = 10 * time.Minute
	// DefaultStepDelay is the pause between the progress and log
	// notifications of test_tool_with_progress and test_tool_with_logging,
	// as the suite's reference servers pause.
	DefaultStepDelay = 50 * time.Millisecond
)

// MinStateKeyLen is the shortest Options.StateKey Register accepts: the
// output size of SHA-256, below which an HMAC key is weaker than the MAC.
const MinStateKeyLen = 32

// ErrOptions is returned by Register for options it cannot work with.
var ErrOptions = errors.New("invalid conformance fixture options")

// Options configures the fixture. The zero value is usable.
type Options struct {
	// StateKey is the HMAC-SHA256 key that seals requestState; at least
	// MinStateKeyLen bytes. nil = a random key made by Register, which is
	// right for one instance: instances of one shared-subscription group
	// (where the next round may reach another instance) must share a key.
	StateKey []byte
	// StateTTL is how long a requestState stays valid; 0 = DefaultStateTTL.
	StateTTL time.Duration
	// StepDelay is the pause between two progress or log notifications;
	// 0 = DefaultStepDelay.
	StepDelay time.Duration
	// Logger receives the fixture's logs (component "conformance"); nil =
	// discard.
	Logger *logrus.Entry

	// now replaces time.Now for state expiry (tests).
	now func() time.Time
}

// fixture is the state shared by the handlers Register installs.
type fixture struct {
	opts  Options
	log   *logrus.Entry
	tools map[string]*fixtureTool
	now   func() time.Time
}

// Register adds the whole fixture to a: every tool (with its description
// and an object inputSchema), the resources/*, prompts/* and
// completion/complete methods, and its own tools/call, which answers
// complete and "input required" results alike. Call it before a.Run.
func Register(a *expertagent.Agent, opts Options) error {
	if a == nil {
		return fmt.Errorf("%w: nil agent", ErrOptions)
	}
	f, err := newFixture(opts)
	if err != nil {
		return err
	}
	for _, t := range f.toolList() {
		if err := a.AddTool(t.tool); err != nil {
			return fmt.Errorf("conformance: %w", err)
		}
		f.tools[t.tool.Name] = t
	}
	// The Agent's own tools/call can only answer complete results (a
	// ToolHandler returns a *CallResult): this one also answers
	// input_required. Tools are still added above, for tools/list.
	a.Handle(methodToolsCall, f.callTool)
	a.Handle("resources/list", f.listResources)
	a.Handle("resources/templates/list", f.listResourceTemplates)
	a.Handle("resources/read", f.readResource)
	a.Handle("resources/subscribe", f.subscribeResource)
	a.Handle("resources/unsubscribe", f.subscribeResource)
	a.Handle("prompts/list", f.listPrompts)
	a.Handle("prompts/get", f.getPrompt)
	a.Handle("completion/complete", f.complete)
	return nil
}

// newFixture checks opts, fills in defaults and makes the state key.
func newFixture(opts Options) (*fixture, error) {
	if opts.StateKey == nil {
		opts.StateKey = make([]byte, MinStateKeyLen)
		if _, err := io.ReadFull(rand.Reader, opts.StateKey); err != nil {
			return nil, fmt.Errorf("conformance: state key: %w", err)
		}
	} else {
		if len(opts.StateKey) < MinStateKeyLen {
			return nil, fmt.Errorf("%w: StateKey has %d bytes, want at least %d", ErrOptions, len(opts.StateKey), MinStateKeyLen)
		}
		opts.StateKey = append([]byte(nil), opts.StateKey...)
	}
	if opts.StateTTL <= 0 {
		opts.StateTTL = DefaultStateTTL
	}
	if opts.StepDelay <= 0 {
		opts.StepDelay = DefaultStepDelay
	}
	log := logutil.OrDiscard(opts.Logger)
	opts.Logger = nil
	now := opts.now
	if now == nil {
		now = time.Now
	}
	return &fixture{
		opts:  opts,
		log:   log.WithField("component", "conformance"),
		tools: make(map[string]*fixtureTool),
		now:   now,
	}, nil
}
